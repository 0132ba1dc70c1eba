// A background thread's place in the process, for PeerCA's P256Presigner: its scheduling class,
// its ID, and the process's fork generation; the ledger writer's raised priority. The declarations need no system header (a Clang module that includes
// <sched.h> would own `struct timespec` for every Swift file that imports it);
// backgroundthread.c includes them.
#ifndef TOKENTOOL_CBACKGROUNDTHREAD_H
#define TOKENTOOL_CBACKGROUNDTHREAD_H

// Puts the calling thread in Linux's SCHED_IDLE class (5): it runs only on a CPU nothing else in
// its scheduling group wants. Where that is refused (a seccomp profile), the lowest nice value
// (19) instead: on Linux both apply to the calling thread only. 0: SCHED_IDLE; 1: nice 19; -1:
// neither (and on other systems, where setpriority would renice the whole process).
int tokentool_thread_set_idle_priority(void);

// The calling thread's ID (Linux's gettid), -1 elsewhere.
int tokentool_thread_id(void);

// A raised priority for a piece of latency-critical work (PeerCA's ledger writer, during each
// batch's transaction and flush): the calling thread's nice value lowered by 10 (to at most
// -20, i.e. more CPU time and earlier wake-ups than the threads that compute certificates), where
// the process may do so (root, CAP_SYS_NICE, or an RLIMIT_NICE of at least 30 for a thread at
// nice 0). Returns the value to hand to tokentool_thread_boost_end, which puts the thread's nice
// value back, or TOKENTOOL_NO_BOOST when the thread was left as it was: the environment variable
// TOKENTOOL_WRITER_BOOST was "0" when the process started, or the kernel refused (then no later
// call tries again). A thread created while its creator is raised inherits the raised value: the
// work between begin and end must not start threads. Linux only (elsewhere setpriority would
// change the whole process): TOKENTOOL_NO_BOOST.
#define TOKENTOOL_NO_BOOST 1000
int tokentool_thread_boost_begin(void);
void tokentool_thread_boost_end(int saved);
// Calls to tokentool_thread_boost_begin and those that raised the priority, since the process
// started, and the state: 0 on, 1 off by the environment, 2 off because the kernel refused.
void tokentool_thread_boost_counters(long long *attempts, long long *boosted, int *state);

// The process's fork generation: how many fork() calls (without exec) separate this process from
// the one that loaded this library. A pthread_atfork child handler, registered when the library
// is loaded, adds one in each child. Unlike the process ID, which the kernel recycles, a child made
// by fork() never reads its parent's value: state that must stay with the process that made it
// (presigned nonces, buffered random bytes) records the generation and the process ID and checks
// both before each use. A child made without the atfork handlers (glibc's _Fork, a raw clone)
// reads its parent's generation but has its own process ID.
unsigned long tokentool_fork_generation(void);

// The calling process's ID (getpid) without a system call after the first: cached in a page the
// kernel zeroes in every child made from this process's memory (MADV_WIPEONFORK, Linux 4.14 and
// later; fork, glibc's _Fork and a raw clone alike), so a child reads its own ID, never its
// parent's. Where the page cannot be made, every call is a getpid.
// tokentool_process_id_is_cached: 1 when the cache is in use, 0 otherwise.
int tokentool_process_id(void);
int tokentool_process_id_is_cached(void);

#endif
