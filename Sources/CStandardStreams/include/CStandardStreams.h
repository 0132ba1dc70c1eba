#ifndef CSTANDARDSTREAMS_H
#define CSTANDARDSTREAMS_H

#include <stddef.h>

/// C's standard output and error, for the tokentool executable: Swift 6 refuses to read the
/// `stdout` and `stderr` globals (shared mutable state), and FileHandle's non-throwing write
/// traps when a write fails (a full disk).

/// Writes `count` bytes to standard output through its buffer (the one `print` writes to).
void tt_stdout_write(const void *bytes, size_t count);

/// Writes `text` to standard output and flushes it; failures are ignored.
void tt_stdout_say(const char *text);

/// Writes `text` to standard error; failures are ignored.
void tt_stderr_write(const char *text);

/// Flushes standard output: 0 when everything written to it arrived, else an errno value (EIO
/// when the stream's error flag was set by an earlier write).
int tt_stdout_finish(void);

#endif
