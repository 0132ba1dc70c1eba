// See include/CTestProcess.h.
//
// Every Process.run() on Linux lists /proc/self/fd with readdir. glibc's opendir allocates the
// DIR and its 32 KiB buffer with one malloc (sizeof(DIR) + 32768 bytes for /proc). Below malloc's
// mmap threshold (128 KiB by default) that block lies in a heap, where the end of a thread's
// arena can be followed by an unmapped page: Foundation's 256-byte copy of a record near the
// buffer's end then faults (seen here: a CI run of the suite died by SIGSEGV in Process.run(),
// `memcpy` at a page boundary, with 1,353 descriptors open). With the threshold at 32 KiB the
// block gets a mapping of its own, rounded up to whole pages: ≈ 4 KiB past the buffer's end stay
// mapped, more than the copy can read. Larger blocks of the test process are mapped too, which
// only the tests pay for.
#include "CTestProcess.h"

#include <dirent.h>
#include <malloc.h>
#include <stddef.h>

__attribute__((constructor)) static void map_directory_buffers(void) {
    mallopt(M_MMAP_THRESHOLD, 32 * 1024);
}

int tokentool_directory_buffer_is_mapped(void) {
    DIR *directory = opendir("/proc/self/fd");
    if (directory == NULL) return 0;
    // glibc's chunk header: the size word before the block, its bit 1 set for a mapped chunk.
    size_t size = ((const size_t *)(const void *)directory)[-1];
    closedir(directory);
    return (size & 2) != 0;
}
