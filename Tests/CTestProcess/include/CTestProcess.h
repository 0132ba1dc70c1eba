// Test-only: keeps Foundation's Process.run() in the test binary clear of a crash in Swift 6.3's
// swift-corelibs-foundation (findMaximumOpenFromProcSelfFD copies a whole 256-byte d_name from
// each record readdir returns; for a record near the end of glibc's directory buffer the copy
// reads past the buffer, a SIGSEGV when the next page is not mapped; swiftlang/
// swift-corelibs-foundation pull request 5472). See process_guard.c.
#ifndef TOKENTOOL_CTESTPROCESS_H
#define TOKENTOOL_CTESTPROCESS_H

// 1 when readdir, for a record whose 256-byte name field would end past the page it starts in,
// returns a whole-size copy instead (the test binary's readdir, process_guard.c), and is the
// readdir the process's libraries call; 0 otherwise. Call it with a few hundred descriptors open,
// so that /proc/self/fd has records at page ends.
int tokentool_readdir_copies_records_at_page_ends(void);

#endif
