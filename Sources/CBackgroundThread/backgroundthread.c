// See include/CBackgroundThread.h.
#include "CBackgroundThread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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

#ifdef __linux__
// 0: on; 1: off (TOKENTOOL_WRITER_BOOST=0, read once at load); 2: off (the kernel refused).
static _Atomic int boost_state = 0;
static _Atomic long long boost_attempts = 0;
static _Atomic long long boost_count = 0;

__attribute__((constructor)) static void boost_read_environment(void) {
    const char *setting = getenv("TOKENTOOL_WRITER_BOOST");
    if (setting != NULL && strcmp(setting, "0") == 0) boost_state = 1;
}
#endif

int tokentool_thread_boost_begin(void) {
#ifdef __linux__
    boost_attempts += 1;
    if (boost_state != 0) return TOKENTOOL_NO_BOOST;
    id_t thread = (id_t)tokentool_thread_id();
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, thread);
    if (nice == -1 && errno != 0) return TOKENTOOL_NO_BOOST;
    int raised = nice - 10 < -20 ? -20 : nice - 10;
    if (raised == nice) return TOKENTOOL_NO_BOOST;
    if (setpriority(PRIO_PROCESS, thread, raised) != 0) {
        // EPERM, EACCES (no CAP_SYS_NICE, RLIMIT_NICE too low), or a seccomp filter's ENOSYS:
        // no later call tries again.
        int on = 0;
        atomic_compare_exchange_strong(&boost_state, &on, 2);
        return TOKENTOOL_NO_BOOST;
    }
    boost_count += 1;
    return nice;
#else
    return TOKENTOOL_NO_BOOST;
#endif
}

void tokentool_thread_boost_end(int saved) {
#ifdef __linux__
    if (saved == TOKENTOOL_NO_BOOST) return;
    setpriority(PRIO_PROCESS, (id_t)tokentool_thread_id(), saved);
#else
    (void)saved;
#endif
}

void tokentool_thread_boost_counters(long long *attempts, long long *boosted, int *state) {
#ifdef __linux__
    *attempts = boost_attempts;
    *boosted = boost_count;
    *state = boost_state;
#else
    *attempts = 0;
    *boosted = 0;
    *state = 1;
#endif
}

static _Atomic unsigned long fork_generation = 0;

// Runs in the child right after fork(), in the thread that forked: only an atomic add.
static void fork_child(void) { fork_generation += 1; }

// At load, while the process has one thread: no registration can be under way at a fork.
// Should it fail (out of memory), the generation never changes and the process ID, which every
// owner check compares too, is what tells a child from its parent.
__attribute__((constructor)) static void fork_register(void) { pthread_atfork(NULL, NULL, fork_child); }

unsigned long tokentool_fork_generation(void) { return fork_generation; }

// The process ID, cached in a page of its own marked MADV_WIPEONFORK: the kernel gives every
// child made from this process's memory (fork, _Fork, clone without CLONE_VM) that page zeroed,
// so a child finds no cached ID and asks the kernel for its own. NULL where the page could not be
// made or marked (then every call asks the kernel).
static _Atomic(int) *pid_cache = NULL;

__attribute__((constructor)) static void pid_cache_create(void) {
#if defined(__linux__) && defined(MADV_WIPEONFORK)
    long size = sysconf(_SC_PAGESIZE);
    if (size <= 0) return;
    void *page = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return;
    if (madvise(page, (size_t)size, MADV_WIPEONFORK) != 0) {
        munmap(page, (size_t)size);
        return;
    }
    pid_cache = (_Atomic(int) *)page;
#endif
}

int tokentool_process_id(void) {
    _Atomic(int) *cache = pid_cache;
    if (cache == NULL) return (int)getpid();
    int pid = atomic_load_explicit(cache, memory_order_relaxed);
    if (pid != 0) return pid;
    pid = (int)getpid();
    atomic_store_explicit(cache, pid, memory_order_relaxed);
    return pid;
}

int tokentool_process_id_is_cached(void) { return pid_cache != NULL; }
