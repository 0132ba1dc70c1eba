// SQLite's default page cache (pcache1) behind a thin layer that skips truncations with nothing to
// drop. See include/CSQLiteWAL.h.
//
// Why: every commit ends with sqlite3PcacheTruncate(cache, database size), which pcache1 carries out
// only when its largest key ever seen (iMaxKey) reaches past that size, and then scans its whole hash
// table unless the keys to drop are fewer than its buckets. A B-tree balance that puts new pages in
// page-number order (balance_nonroot) swaps two pages through a temporary key, the page after the
// lock byte (PENDING_BYTE / page size + 1: 262,145 with 4 KiB pages), and pcache1Rekey raises iMaxKey
// to it. From then on every commit after such a balance walks all buckets and every cached page: with
// the ledger writer's 16 MiB cache (4,096 pages), ≈ 110–160 µs a commit on the 2-core VM (perf: 2.5
// µs a certificate at 64 a commit, 3.5 at 32), though no page is ever past the database's end.
//
// What this layer does: it keeps, per cache, an upper bound of the keys its pages can have (every key
// a fetch that may create a page was asked for, and every key a page was moved to) apart from the
// temporary key, and how many pages were moved to the temporary key and not yet away from it. A
// truncation whose limit is above that bound while no page sits at the temporary key has nothing to
// drop, and is skipped; any other is passed to pcache1 (which then scans as before, and the bound
// comes down to the limit). The bound only ever over-estimates: pages pcache1 recycles or frees on
// its own leave it where it was. Everything else is passed through unchanged.

#include "CSQLiteWAL.h"

#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PAGECACHE_LOCK_BYTE 0x40000000u

typedef struct TTPageCache {
    sqlite3_pcache *inner;
    unsigned int maxKey;     // no page has a larger key, apart from the temporary one
    unsigned int tempKey;    // the key balance_nonroot swaps pages through
    int atTempKey;           // pages moved to tempKey and not away from it; -1: unknown (fetched there)
    long long skipped, passed;  // this cache's truncations (the self-test reads them)
} TTPageCache;

static sqlite3_pcache_methods2 base_methods;
static sqlite3_pcache_methods2 layer_methods;
// 0: installed; 1: off (TOKENTOOL_SQLITE_PAGECACHE=0 when the process started); 2: not installed
// (SQLite had been initialized, or configuring it failed).
static _Atomic int layer_state = 2;
static _Atomic long long truncations_skipped = 0;

static int layer_init(void *arg) {
    (void)arg;
    return base_methods.xInit(base_methods.pArg);
}

static void layer_shutdown(void *arg) {
    (void)arg;
    if (base_methods.xShutdown) base_methods.xShutdown(base_methods.pArg);
}

static sqlite3_pcache *layer_create(int page_size, int extra_size, int purgeable) {
    TTPageCache *cache = sqlite3_malloc(sizeof(TTPageCache));
    if (!cache) return NULL;
    cache->inner = base_methods.xCreate(page_size, extra_size, purgeable);
    if (!cache->inner) {
        sqlite3_free(cache);
        return NULL;
    }
    cache->maxKey = 0;
    cache->tempKey = page_size > 0 ? PAGECACHE_LOCK_BYTE / (unsigned int)page_size + 1 : 0;
    cache->atTempKey = 0;
    cache->skipped = 0;
    cache->passed = 0;
    return (sqlite3_pcache *)cache;
}

static void layer_cachesize(sqlite3_pcache *p, int pages) {
    base_methods.xCachesize(((TTPageCache *)p)->inner, pages);
}

static int layer_pagecount(sqlite3_pcache *p) {
    return base_methods.xPagecount(((TTPageCache *)p)->inner);
}

static sqlite3_pcache_page *layer_fetch(sqlite3_pcache *p, unsigned int key, int create) {
    TTPageCache *cache = (TTPageCache *)p;
    sqlite3_pcache_page *page = base_methods.xFetch(cache->inner, key, create);
    if (page && create) {
        // A page may have been made at `key` (with create 0 a fetch only finds one).
        if (key == cache->tempKey) cache->atTempKey = -1;
        else if (key > cache->maxKey) cache->maxKey = key;
    }
    return page;
}

static void layer_unpin(sqlite3_pcache *p, sqlite3_pcache_page *page, int discard) {
    base_methods.xUnpin(((TTPageCache *)p)->inner, page, discard);
}

static void layer_rekey(sqlite3_pcache *p, sqlite3_pcache_page *page, unsigned int old_key, unsigned int new_key) {
    TTPageCache *cache = (TTPageCache *)p;
    base_methods.xRekey(cache->inner, page, old_key, new_key);
    if (cache->atTempKey >= 0) {
        if (new_key == cache->tempKey) cache->atTempKey += 1;
        if (old_key == cache->tempKey && cache->atTempKey > 0) cache->atTempKey -= 1;
    }
    if (new_key != cache->tempKey && new_key > cache->maxKey) cache->maxKey = new_key;
}

static void layer_truncate(sqlite3_pcache *p, unsigned int limit) {
    TTPageCache *cache = (TTPageCache *)p;
    int tempBelowLimit = cache->tempKey < limit;
    if (limit > cache->maxKey && (cache->atTempKey == 0 || tempBelowLimit)) {
        truncations_skipped += 1;
        cache->skipped += 1;
        return;
    }
    cache->passed += 1;
    base_methods.xTruncate(cache->inner, limit);
    if (cache->maxKey >= limit) cache->maxKey = limit > 0 ? limit - 1 : 0;
    if (!tempBelowLimit) cache->atTempKey = 0;
}

static void layer_destroy(sqlite3_pcache *p) {
    TTPageCache *cache = (TTPageCache *)p;
    base_methods.xDestroy(cache->inner);
    sqlite3_free(cache);
}

static void layer_shrink(sqlite3_pcache *p) {
    if (base_methods.xShrink) base_methods.xShrink(((TTPageCache *)p)->inner);
}

// At load, before anything in the process can have initialized SQLite (sqlite3_config may only be
// called then, and from one thread).
__attribute__((constructor)) static void pagecache_install(void) {
    const char *setting = getenv("TOKENTOOL_SQLITE_PAGECACHE");
    if (setting != NULL && strcmp(setting, "0") == 0) {
        layer_state = 1;
        return;
    }
    if (sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &base_methods) != SQLITE_OK || base_methods.xCreate == NULL
        || base_methods.xInit == NULL || base_methods.xTruncate == NULL || base_methods.iVersion < 1) {
        return;
    }
    memset(&layer_methods, 0, sizeof(layer_methods));
    layer_methods.iVersion = 1;
    layer_methods.pArg = NULL;
    layer_methods.xInit = layer_init;
    layer_methods.xShutdown = layer_shutdown;
    layer_methods.xCreate = layer_create;
    layer_methods.xCachesize = layer_cachesize;
    layer_methods.xPagecount = layer_pagecount;
    layer_methods.xFetch = layer_fetch;
    layer_methods.xUnpin = layer_unpin;
    layer_methods.xRekey = layer_rekey;
    layer_methods.xTruncate = layer_truncate;
    layer_methods.xDestroy = layer_destroy;
    layer_methods.xShrink = layer_shrink;
    if (sqlite3_config(SQLITE_CONFIG_PCACHE2, &layer_methods) == SQLITE_OK) layer_state = 0;
}

void tokentool_pagecache_counters(int *state, long long *skipped) {
    *state = layer_state;
    *skipped = truncations_skipped;
}

// The self-test: a cache made through the layer over SQLite's own, driven as the pager drives it.
// Returns 0, or the number of the first check that failed (-1: the layer is not installed).
static int selftest_has(TTPageCache *cache, unsigned int key) {
    sqlite3_pcache_page *page = layer_fetch((sqlite3_pcache *)cache, key, 0);
    if (!page) return 0;
    layer_unpin((sqlite3_pcache *)cache, page, 0);
    return 1;
}

static int selftest_run(TTPageCache *cache) {
    sqlite3_pcache *p = (sqlite3_pcache *)cache;
    unsigned int temp = cache->tempKey;
    if (temp != PAGECACHE_LOCK_BYTE / 4096 + 1) return 2;
    for (unsigned int key = 1; key <= 10; key++) {
        sqlite3_pcache_page *page = layer_fetch(p, key, 2);
        if (!page) return 3;
        layer_unpin(p, page, 0);
    }
    // Nothing past 10: skipped, and every page is still there.
    layer_truncate(p, 11);
    if (cache->skipped != 1 || cache->passed != 0 || !selftest_has(cache, 10) || !selftest_has(cache, 1)) return 4;
    // balance_nonroot's swap of pages 3 and 4 through the temporary key.
    sqlite3_pcache_page *three = layer_fetch(p, 3, 0), *four = layer_fetch(p, 4, 0);
    if (!three || !four) return 5;
    layer_rekey(p, three, 3, temp);
    layer_rekey(p, four, 4, 3);
    layer_rekey(p, three, temp, 4);
    layer_unpin(p, three, 0);
    layer_unpin(p, four, 0);
    layer_truncate(p, 11);
    if (cache->skipped != 2 || cache->passed != 0 || !selftest_has(cache, 3) || !selftest_has(cache, 4) || selftest_has(cache, temp)) return 6;
    // A page left at the temporary key: the truncation reaches pcache1, which drops it.
    sqlite3_pcache_page *seven = layer_fetch(p, 7, 0);
    if (!seven) return 7;
    layer_rekey(p, seven, 7, temp);
    layer_unpin(p, seven, 0);
    layer_truncate(p, 11);
    if (cache->passed != 1 || selftest_has(cache, temp) || !selftest_has(cache, 6)) return 8;
    // Pages past the limit: passed, and dropped; below it, kept; then the bound is the limit.
    for (unsigned int key = 11; key <= 20; key++) {
        sqlite3_pcache_page *page = layer_fetch(p, key, 2);
        if (!page) return 9;
        layer_unpin(p, page, 0);
    }
    layer_truncate(p, 15);
    if (cache->passed != 2 || selftest_has(cache, 15) || selftest_has(cache, 20) || !selftest_has(cache, 14)) return 10;
    layer_truncate(p, 15);
    if (cache->skipped != 3 || cache->passed != 2) return 11;
    // Everything (a pager reset truncates at 1).
    layer_truncate(p, 1);
    if (cache->passed != 3 || selftest_has(cache, 1) || selftest_has(cache, 14)) return 12;
    return 0;
}

int tokentool_pagecache_selftest(void) {
    if (layer_state != 0) return -1;
    if (sqlite3_initialize() != SQLITE_OK) return 1;
    TTPageCache *cache = (TTPageCache *)layer_create(4096, 64, 1);
    if (!cache) return 1;
    layer_cachesize((sqlite3_pcache *)cache, 100);
    int result = selftest_run(cache);
    layer_destroy((sqlite3_pcache *)cache);
    return result;
}
