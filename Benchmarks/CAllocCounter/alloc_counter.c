#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <malloc.h>
#include "alloc_counter.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static _Thread_local int counting;
static _Thread_local uint64_t count;

void tb_alloc_counting(int on) { counting = on; }
uint64_t tb_alloc_count(void) { return count; }
void tb_malloc_trim(void) { malloc_trim(0); }

void *malloc(size_t n) {
    if (counting) count++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size) {
    if (counting) count++;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n) {
    if (counting) count++;
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t alignment, size_t n) {
    if (counting) count++;
    return __libc_memalign(alignment, n);
}

void *memalign(size_t alignment, size_t n) {
    if (counting) count++;
    return __libc_memalign(alignment, n);
}

int posix_memalign(void **out, size_t alignment, size_t n) {
    if (counting) count++;
    void *p = __libc_memalign(alignment, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
