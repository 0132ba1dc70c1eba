// Thread scheduling for PeerCA's P256Presigner. The declarations need no system header (the
// Clang module that includes <sched.h> would own `struct timespec` for every Swift file that
// imports it); threadpriority.c includes them.
#ifndef TOKENTOOL_CTHREADPRIORITY_H
#define TOKENTOOL_CTHREADPRIORITY_H

// Puts the calling thread in Linux's SCHED_IDLE class (5): it runs only on a CPU nothing else in
// its scheduling group wants. Where that is refused (a seccomp profile), the lowest nice value
// (19) instead: on Linux both apply to the calling thread only. 0: SCHED_IDLE; 1: nice 19; -1:
// neither (and on other systems, where setpriority would renice the whole process).
int tokentool_thread_set_idle_priority(void);

// The calling thread's ID (Linux's gettid), -1 elsewhere.
int tokentool_thread_id(void);

#endif
