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

#endif
