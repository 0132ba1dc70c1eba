// The "tokentool-walbuffer" SQLite VFS: SQLite's default VFS, with the writes to a write-ahead log
// gathered in memory and written together. See include/CSQLiteWAL.h.
//
// Why: SQLite writes every WAL frame with two pwrite calls, a 24-byte header and then the page at an
// offset 24 bytes past a page boundary. On this kind of machine a pwrite costs about 4 µs of kernel
// time whatever its size, so a commit of 100 frames spent ≈ 900 µs in the kernel where one pwrite of
// the same 412 KB costs ≈ 100 µs (tokenbench --issuance-stages, ledger row).
//
// When the gathered bytes must be in the file:
// - xSync: SQLite syncs the WAL at each commit (synchronous = FULL) before it publishes the commit in
//   the wal-index; nothing is reported durable before this flush and the fsync after it.
// - xRead, xFileSize, xTruncate, xClose, xFileControl: anything that reads or reshapes the file.
// - xShmBarrier on any file of this VFS: SQLite calls it between writing the two copies of the
//   wal-index header that publish a commit, so even without a sync at commit (synchronous = NORMAL
//   or OFF) no reader can see a commit whose frames are still in memory.
// - A write that does not continue the gathered run (SQLite rewriting a frame in place), or a run
//   past 1 MiB: the run is written first, in order. A run is written in calls of
//   at most 124 KiB (the unix VFS masks a write's length to 17 bits).
// A write error found while flushing is returned by the call that flushed (the commit's sync fails,
// SQLite rolls the transaction back); the gathered bytes are dropped, as a failed write would be.

#include "CSQLiteWAL.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#define WALBUFFER_VFS_NAME "tokentool-walbuffer"
#define WALBUFFER_LIMIT (1 << 20)
#define WALBUFFER_CHUNK (124 * 1024)

typedef struct WBFile WBFile;
struct WBFile {
    sqlite3_file base;      // pMethods: walbuffer_methods (or NULL when the open failed)
    sqlite3_file *real;     // the default VFS's file, in the memory right after this struct
    int isWAL;
    pthread_mutex_t mutex;  // WAL files: guards the fields below (another connection's barrier flushes)
    unsigned char *buffer;
    int count;              // bytes gathered
    int capacity;
    sqlite3_int64 offset;   // file offset of buffer[0]
    long long bytes;        // written through the buffer, and the calls that wrote them
    long long writes;
    WBFile *next;           // open WAL files (registry_mutex)
    WBFile *previous;
};

static sqlite3_vfs *real_vfs;
static sqlite3_vfs walbuffer_vfs;
static pthread_once_t register_once = PTHREAD_ONCE_INIT;
static int register_result = SQLITE_ERROR;
static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static WBFile *open_wal_files;
static long long written_bytes;
static long long written_calls;

// Writes the gathered bytes; the caller holds file->mutex.
static int flush_locked(WBFile *file) {
    if (file->count == 0) return SQLITE_OK;
    int rc = SQLITE_OK;
    for (int done = 0; done < file->count && rc == SQLITE_OK;) {
        // The unix VFS writes at most 128 KiB - 1 per call (it masks the length with 0x1ffff).
        int chunk = file->count - done < WALBUFFER_CHUNK ? file->count - done : WALBUFFER_CHUNK;
        rc = file->real->pMethods->xWrite(file->real, file->buffer + done, chunk, file->offset + done);
        if (rc == SQLITE_OK) {
            __atomic_add_fetch(&written_bytes, chunk, __ATOMIC_RELAXED);
            __atomic_add_fetch(&written_calls, 1, __ATOMIC_RELAXED);
            file->bytes += chunk;
            file->writes += 1;
        }
        done += chunk;
    }
    file->count = 0;
    return rc;
}

static int flush(WBFile *file) {
    if (!file->isWAL) return SQLITE_OK;
    pthread_mutex_lock(&file->mutex);
    int rc = flush_locked(file);
    pthread_mutex_unlock(&file->mutex);
    return rc;
}

// Writes the gathered bytes of every open WAL file (what a barrier does first); the first error.
static int flush_all(void) {
    int rc = SQLITE_OK;
    pthread_mutex_lock(&registry_mutex);
    for (WBFile *file = open_wal_files; file; file = file->next) {
        int one = flush(file);
        if (rc == SQLITE_OK) rc = one;
    }
    pthread_mutex_unlock(&registry_mutex);
    return rc;
}

void tokentool_walbuffer_counters(long long *bytes, long long *writes) {
    if (bytes) *bytes = __atomic_load_n(&written_bytes, __ATOMIC_RELAXED);
    if (writes) *writes = __atomic_load_n(&written_calls, __ATOMIC_RELAXED);
}

static const sqlite3_io_methods walbuffer_methods;

int tokentool_walbuffer_connection_counters(void *connection, long long *bytes, long long *writes) {
    sqlite3_file *wal = NULL;
    // In WAL mode the journal pointer is the WAL file (SQLITE_FCNTL_JOURNAL_POINTER).
    if (sqlite3_file_control((sqlite3 *)connection, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) != SQLITE_OK || wal == NULL
        || wal->pMethods != &walbuffer_methods)
        return SQLITE_NOTFOUND;
    WBFile *file = (WBFile *)wal;
    if (!file->isWAL) return SQLITE_NOTFOUND;
    pthread_mutex_lock(&file->mutex);
    if (bytes) *bytes = file->bytes;
    if (writes) *writes = file->writes;
    pthread_mutex_unlock(&file->mutex);
    return SQLITE_OK;
}

// MARK: io methods

static int wb_close(sqlite3_file *f) {
    WBFile *file = (WBFile *)f;
    int rc = SQLITE_OK;
    if (file->isWAL) {
        pthread_mutex_lock(&registry_mutex);
        if (file->previous) file->previous->next = file->next; else open_wal_files = file->next;
        if (file->next) file->next->previous = file->previous;
        pthread_mutex_unlock(&registry_mutex);
        rc = flush(file);
        free(file->buffer);
        file->buffer = NULL;
        pthread_mutex_destroy(&file->mutex);
    }
    int closed = file->real->pMethods ? file->real->pMethods->xClose(file->real) : SQLITE_OK;
    return rc != SQLITE_OK ? rc : closed;
}

static int wb_read(sqlite3_file *f, void *data, int amount, sqlite3_int64 offset) {
    WBFile *file = (WBFile *)f;
    int rc = flush(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xRead(file->real, data, amount, offset);
}

static int wb_write(sqlite3_file *f, const void *data, int amount, sqlite3_int64 offset) {
    WBFile *file = (WBFile *)f;
    if (!file->isWAL) return file->real->pMethods->xWrite(file->real, data, amount, offset);
    pthread_mutex_lock(&file->mutex);
    int rc = SQLITE_OK;
    // Not the continuation of the gathered run, or past the limit: write the run first.
    if (file->count > 0 && (offset != file->offset + file->count || file->count + amount > WALBUFFER_LIMIT)) {
        rc = flush_locked(file);
    }
    if (rc == SQLITE_OK) {
        if (amount > WALBUFFER_CHUNK) {
            rc = file->real->pMethods->xWrite(file->real, data, amount, offset);  // SQLite's own size: pass it on
        } else {
            if (file->count + amount > file->capacity) {
                int capacity = file->capacity ? file->capacity : 64 * 1024;
                while (capacity < file->count + amount) capacity *= 2;
                unsigned char *grown = realloc(file->buffer, capacity);
                if (!grown) {
                    // No memory for the buffer: write the run and this write directly.
                    rc = flush_locked(file);
                    if (rc == SQLITE_OK) rc = file->real->pMethods->xWrite(file->real, data, amount, offset);
                    pthread_mutex_unlock(&file->mutex);
                    return rc;
                }
                file->buffer = grown;
                file->capacity = capacity;
            }
            if (file->count == 0) file->offset = offset;
            memcpy(file->buffer + file->count, data, amount);
            file->count += amount;
        }
    }
    pthread_mutex_unlock(&file->mutex);
    return rc;
}

static int wb_truncate(sqlite3_file *f, sqlite3_int64 size) {
    WBFile *file = (WBFile *)f;
    int rc = flush(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xTruncate(file->real, size);
}

static int wb_sync(sqlite3_file *f, int flags) {
    WBFile *file = (WBFile *)f;
    int rc = flush(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xSync(file->real, flags);
}

static int wb_file_size(sqlite3_file *f, sqlite3_int64 *size) {
    WBFile *file = (WBFile *)f;
    int rc = flush(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xFileSize(file->real, size);
}

static int wb_lock(sqlite3_file *f, int level) {
    WBFile *file = (WBFile *)f;
    return file->real->pMethods->xLock(file->real, level);
}

static int wb_unlock(sqlite3_file *f, int level) {
    WBFile *file = (WBFile *)f;
    return file->real->pMethods->xUnlock(file->real, level);
}

static int wb_check_reserved_lock(sqlite3_file *f, int *out) {
    WBFile *file = (WBFile *)f;
    return file->real->pMethods->xCheckReservedLock(file->real, out);
}

static int wb_file_control(sqlite3_file *f, int op, void *arg) {
    WBFile *file = (WBFile *)f;
    int rc = flush(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xFileControl(file->real, op, arg);
}

static int wb_sector_size(sqlite3_file *f) {
    WBFile *file = (WBFile *)f;
    return file->real->pMethods->xSectorSize(file->real);
}

static int wb_device_characteristics(sqlite3_file *f) {
    WBFile *file = (WBFile *)f;
    return file->real->pMethods->xDeviceCharacteristics(file->real);
}

static int wb_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out) {
    WBFile *file = (WBFile *)f;
    if (file->real->pMethods->iVersion < 2) return SQLITE_IOERR_SHMMAP;
    return file->real->pMethods->xShmMap(file->real, page, size, extend, out);
}

static int wb_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
    WBFile *file = (WBFile *)f;
    if (file->real->pMethods->iVersion < 2) return SQLITE_IOERR_SHMLOCK;
    return file->real->pMethods->xShmLock(file->real, offset, n, flags);
}

static void wb_shm_barrier(sqlite3_file *f) {
    WBFile *file = (WBFile *)f;
    // A write error here cannot be returned; the same bytes' sync (or the next read) reports it.
    (void)flush_all();
    if (file->real->pMethods->iVersion >= 2) file->real->pMethods->xShmBarrier(file->real);
}

static int wb_shm_unmap(sqlite3_file *f, int delete_flag) {
    WBFile *file = (WBFile *)f;
    if (file->real->pMethods->iVersion < 2) return SQLITE_OK;
    return file->real->pMethods->xShmUnmap(file->real, delete_flag);
}

static int wb_fetch(sqlite3_file *f, sqlite3_int64 offset, int amount, void **out) {
    WBFile *file = (WBFile *)f;
    if (file->real->pMethods->iVersion < 3 || file->isWAL) {
        *out = NULL;  // no memory map: SQLite reads instead
        return SQLITE_OK;
    }
    return file->real->pMethods->xFetch(file->real, offset, amount, out);
}

static int wb_unfetch(sqlite3_file *f, sqlite3_int64 offset, void *page) {
    WBFile *file = (WBFile *)f;
    if (file->real->pMethods->iVersion < 3 || file->isWAL) return SQLITE_OK;
    return file->real->pMethods->xUnfetch(file->real, offset, page);
}

static const sqlite3_io_methods walbuffer_methods = {
    3,
    wb_close,
    wb_read,
    wb_write,
    wb_truncate,
    wb_sync,
    wb_file_size,
    wb_lock,
    wb_unlock,
    wb_check_reserved_lock,
    wb_file_control,
    wb_sector_size,
    wb_device_characteristics,
    wb_shm_map,
    wb_shm_lock,
    wb_shm_barrier,
    wb_shm_unmap,
    wb_fetch,
    wb_unfetch,
};

// MARK: vfs methods (all but xOpen pass to the default VFS)

static int wb_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *out_flags) {
    (void)vfs;
    WBFile *file = (WBFile *)f;
    memset(file, 0, sizeof(WBFile));
    file->real = (sqlite3_file *)(file + 1);
    int rc = real_vfs->xOpen(real_vfs, name, file->real, flags, out_flags);
    if (rc != SQLITE_OK || file->real->pMethods == NULL) {
        // xClose is called when pMethods is set, even after a failed open: close the real file here.
        if (file->real->pMethods) file->real->pMethods->xClose(file->real);
        file->base.pMethods = NULL;
        return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
    }
    file->isWAL = (flags & SQLITE_OPEN_WAL) != 0;
    if (file->isWAL) {
        pthread_mutex_init(&file->mutex, NULL);
        pthread_mutex_lock(&registry_mutex);
        file->next = open_wal_files;
        if (open_wal_files) open_wal_files->previous = file;
        open_wal_files = file;
        pthread_mutex_unlock(&registry_mutex);
    }
    file->base.pMethods = &walbuffer_methods;
    return SQLITE_OK;
}

static int wb_delete(sqlite3_vfs *vfs, const char *name, int sync_dir) {
    (void)vfs;
    return real_vfs->xDelete(real_vfs, name, sync_dir);
}

static int wb_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}

static int wb_full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    return real_vfs->xFullPathname(real_vfs, name, size, out);
}

static void *wb_dl_open(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return real_vfs->xDlOpen(real_vfs, name);
}

static void wb_dl_error(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    real_vfs->xDlError(real_vfs, size, out);
}

static void (*wb_dl_sym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
    (void)vfs;
    return real_vfs->xDlSym(real_vfs, handle, symbol);
}

static void wb_dl_close(sqlite3_vfs *vfs, void *handle) {
    (void)vfs;
    real_vfs->xDlClose(real_vfs, handle);
}

static int wb_randomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return real_vfs->xRandomness(real_vfs, size, out);
}

static int wb_sleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return real_vfs->xSleep(real_vfs, microseconds);
}

static int wb_current_time(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    return real_vfs->xCurrentTime(real_vfs, out);
}

static int wb_get_last_error(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return real_vfs->xGetLastError ? real_vfs->xGetLastError(real_vfs, size, out) : 0;
}

static int wb_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    (void)vfs;
    if (real_vfs->iVersion >= 2 && real_vfs->xCurrentTimeInt64) return real_vfs->xCurrentTimeInt64(real_vfs, out);
    double days = 0;
    int rc = real_vfs->xCurrentTime(real_vfs, &days);
    *out = (sqlite3_int64)(days * 86400000.0);
    return rc;
}

static void register_vfs(void) {
    real_vfs = sqlite3_vfs_find(NULL);
    if (!real_vfs) return;
    memset(&walbuffer_vfs, 0, sizeof(walbuffer_vfs));
    walbuffer_vfs.iVersion = 2;
    walbuffer_vfs.szOsFile = (int)sizeof(WBFile) + real_vfs->szOsFile;
    walbuffer_vfs.mxPathname = real_vfs->mxPathname;
    walbuffer_vfs.zName = WALBUFFER_VFS_NAME;
    walbuffer_vfs.xOpen = wb_open;
    walbuffer_vfs.xDelete = wb_delete;
    walbuffer_vfs.xAccess = wb_access;
    walbuffer_vfs.xFullPathname = wb_full_pathname;
    walbuffer_vfs.xDlOpen = wb_dl_open;
    walbuffer_vfs.xDlError = wb_dl_error;
    walbuffer_vfs.xDlSym = wb_dl_sym;
    walbuffer_vfs.xDlClose = wb_dl_close;
    walbuffer_vfs.xRandomness = wb_randomness;
    walbuffer_vfs.xSleep = wb_sleep;
    walbuffer_vfs.xCurrentTime = wb_current_time;
    walbuffer_vfs.xGetLastError = wb_get_last_error;
    walbuffer_vfs.xCurrentTimeInt64 = wb_current_time_int64;
    register_result = sqlite3_vfs_register(&walbuffer_vfs, 0);
}

int tokentool_walbuffer_uri_filenames(void) {
    return sqlite3_compileoption_used("USE_URI");
}

const char *tokentool_walbuffer_register(void) {
    pthread_once(&register_once, register_vfs);
    return register_result == SQLITE_OK ? WALBUFFER_VFS_NAME : NULL;
}
