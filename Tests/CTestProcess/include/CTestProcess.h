// Test-only: keeps Foundation's Process.run() in the test binary clear of a crash in Swift 6.3's
// swift-corelibs-foundation (findMaximumOpenFromProcSelfFD copies a whole 256-byte d_name from
// each record readdir returns; for a record at the end of glibc's directory buffer the copy reads
// past the buffer, a SIGSEGV when the next page is not mapped; swiftlang/swift-corelibs-foundation
// pull request 5472). See process_guard.c.
#ifndef TOKENTOOL_CTESTPROCESS_H
#define TOKENTOOL_CTESTPROCESS_H

// 1 when a directory opened now (opendir of /proc/self/fd, as Process.run() does) has its buffer
// in a mapping of its own, with room past its end for that over-read; 0 otherwise.
int tokentool_directory_buffer_is_mapped(void);

#endif
