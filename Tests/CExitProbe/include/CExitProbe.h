// Test-only (TokenKitTests' OpenSSLExitTests): what the system OpenSSL does at the very end of a
// process's exit, after every atexit handler, the point a thread of the process's can reach while
// it exits. The declarations need no OpenSSL header; exit_probe.c includes it.
#ifndef TOKENTOOL_CEXITPROBE_H
#define TOKENTOOL_CEXITPROBE_H

// The argument that makes a new process of the test binary run the probe instead of its tests, when
// it is the first: "--tokentool-exit-probe" (an argument, not an environment variable, which a
// shell could leave set for every later test run).
const char *tokentool_exit_probe_argument(void);

#endif
