#include "CStandardStreams.h"

#include <errno.h>
#include <stdio.h>

void tt_stdout_write(const void *bytes, size_t count) {
    if (count > 0) (void)fwrite(bytes, 1, count, stdout);
}

void tt_stdout_say(const char *text) {
    (void)fputs(text, stdout);
    (void)fflush(stdout);
}

void tt_stderr_write(const char *text) {
    (void)fputs(text, stderr);
}

int tt_stdout_finish(void) {
    errno = 0;
    if (fflush(stdout) != 0) return errno != 0 ? errno : EIO;
    if (ferror(stdout)) return EIO;
    return 0;
}
