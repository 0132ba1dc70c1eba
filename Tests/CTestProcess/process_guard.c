// See include/CTestProcess.h.
//
// Every Process.run() on Linux lists /proc/self/fd with readdir, and Foundation copies
// `d_name` whole: 256 bytes from the record's name, wherever the record ends. glibc packs records
// by their length (24 bytes for a descriptor number), so with ≈ 1,350 descriptors open the last
// records sit at the end of its 32 KiB buffer and the copy reads past it; when the next page is
// not mapped the process dies (a CI run of this suite: SIGSEGV in `memcpy`, at a page boundary,
// in Process.run(), with 1,353 descriptors open).
//
// The test binary defines readdir, which the dynamic linker binds Foundation's calls to (a
// definition in the executable comes first): it calls glibc's, and when the record's name field
// would end past the page the record starts in, returns a whole-size copy in a per-thread buffer
// instead. (Only then: a caller that keeps a record while it reads another directory on the same
// thread would see it overwritten; such records are rare enough, and Foundation keeps none.)
#define _GNU_SOURCE
#include "CTestProcess.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef struct dirent *(*readdir_function)(DIR *);
static readdir_function system_readdir;
static _Thread_local struct dirent whole_record;

__attribute__((constructor)) static void find_system_readdir(void) {
    system_readdir = (readdir_function)dlsym(RTLD_NEXT, "readdir");
}

static int ends_past_its_page(const struct dirent *entry) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)entry;
    uintptr_t end = (uintptr_t)entry->d_name + sizeof entry->d_name;
    return start / page != (end - 1) / page;
}

struct dirent *readdir(DIR *directory) {
    readdir_function next = system_readdir != NULL ? system_readdir : (readdir_function)dlsym(RTLD_NEXT, "readdir");
    struct dirent *entry = next(directory);
    if (entry == NULL || !ends_past_its_page(entry)) return entry;
    size_t length = entry->d_reclen < sizeof whole_record ? entry->d_reclen : sizeof whole_record;
    memset(&whole_record, 0, sizeof whole_record);
    memcpy(&whole_record, entry, length);
    return &whole_record;
}

int tokentool_readdir_copies_records_at_page_ends(void) {
    // With a few hundred descriptors open, /proc/self/fd's records cross page ends: each such
    // record must come back as a copy.
    DIR *directory = opendir("/proc/self/fd");
    if (directory == NULL) return 0;
    int copied = 0, seen = 0;
    struct dirent *entry;
    while ((entry = readdir(directory)) != NULL) {
        seen = 1;
        if (entry == &whole_record) copied = 1;
        if (entry != &whole_record && ends_past_its_page(entry)) { closedir(directory); return 0; }
    }
    closedir(directory);
    // Foundation's call goes to this definition, not straight to glibc's: the address the dynamic
    // linker gives for "readdir" is this function's.
    return seen && copied && dlsym(RTLD_DEFAULT, "readdir") == (void *)readdir;
}
