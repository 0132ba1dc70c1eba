// Counts heap allocations made by the calling thread while counting is on.
// The tokenbench executable defines malloc/calloc/realloc/aligned allocations itself (an
// executable's symbols take precedence over libc's on Linux) and forwards to glibc's
// __libc_* entry points, so no LD_PRELOAD is needed.
#ifndef TOKENBENCH_ALLOC_COUNTER_H
#define TOKENBENCH_ALLOC_COUNTER_H
#include <stdint.h>

void tb_alloc_counting(int on);
uint64_t tb_alloc_count(void);
// Returns the heap's free memory to the system (glibc malloc_trim), so RSS shows what is in use.
void tb_malloc_trim(void);

#endif
