#ifndef CSQLITEWAL_H
#define CSQLITEWAL_H

/// Registers (once per process, thread-safe) the SQLite VFS "tokentool-walbuffer" and returns its
/// name, or NULL when SQLite has no default VFS to wrap or registration failed.
///
/// The VFS is SQLite's default one with one change: writes to a write-ahead log (`-wal` file) are
/// gathered in memory and reach the file together (each run of consecutive writes in calls of up to
/// 124 KiB) before anything that needs them there: a sync (so with `synchronous = FULL` every commit is on
/// disk before SQLite reports it), a read, the file's size, a truncation, a close, and any
/// shared-memory barrier in the process (the step before SQLite publishes a commit to readers).
/// SQLite itself writes each WAL frame as two `pwrite` calls (24-byte header, then the page).
const char *tokentool_walbuffer_register(void);

/// 1 when this SQLite reads `file:` URI filenames by default (compiled with SQLITE_USE_URI, as
/// Debian's is), the only way to name a VFS through a library that opens connections itself.
int tokentool_walbuffer_uri_filenames(void);

/// Bytes written to WAL files through the buffer, and the `pwrite` calls that wrote them, since the
/// process started (for tests and benchmarks).
void tokentool_walbuffer_counters(long long *bytes, long long *writes);

/// The same two counts for one connection's WAL file (`connection` is an `sqlite3 *`): 0 and the
/// counts when its main database's WAL is open through this VFS, SQLITE_NOTFOUND otherwise.
int tokentool_walbuffer_connection_counters(void *connection, long long *bytes, long long *writes);

/// SQLite's default page cache (pcache1) behind a layer that skips a truncation with nothing to drop
/// (pagecache.c), installed when the program loads, before SQLite can have been initialized, for
/// every connection in the process. Each commit ends with a truncation of the cache to the database's
/// size; after a B-tree balance has moved a page through the temporary key past the lock byte,
/// pcache1 answers every such truncation with a walk over its whole hash table and every cached page
/// (≈ 110–160 µs a commit with the ledger writer's 4,096-page cache), though nothing lies past the
/// end. The layer keeps, per cache, an upper bound of its pages' keys and whether any page sits at
/// the temporary key; a truncation above both is skipped, any other reaches pcache1 unchanged.
/// TOKENTOOL_SQLITE_PAGECACHE=0 in the environment when the program starts leaves SQLite's own.
///
/// `state`: 0 installed, 1 off by the environment, 2 not installed (SQLite was initialized before
/// the program's constructors ran, or refused the configuration). `skipped`: the truncations the
/// layer skipped in this process.
void tokentool_pagecache_counters(int *state, long long *skipped);

/// Drives a cache made through the layer, over SQLite's own page cache, as a pager does (pages
/// fetched, moved through the temporary key, truncations with and without pages past the limit) and
/// checks which truncations were skipped and which pages are left: 0 when all checks hold, the
/// number of the first that failed, or -1 when the layer is not installed.
int tokentool_pagecache_selftest(void);

#endif
