// See include/CThreadPriority.h.
#include "CThreadPriority.h"

#ifdef __linux__
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

int tokentool_thread_set_idle_priority(void) {
#ifdef __linux__
    struct sched_param parameter;
    memset(&parameter, 0, sizeof(parameter));
    if (sched_setscheduler(0, 5, &parameter) == 0) return 0;
    return setpriority(PRIO_PROCESS, 0, 19) == 0 ? 1 : -1;
#else
    return -1;
#endif
}

int tokentool_thread_id(void) {
#ifdef __linux__
    return (int)syscall(SYS_gettid);
#else
    return -1;
#endif
}
