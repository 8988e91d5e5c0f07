/* hard_show.h - the hard_* programs' one line per result: "what = ret", and the errno name
 * when ret is negative (strerrorname_np: glibc 2.32), flushed at once so a native run and an
 * emulated one print the same lines in the same order whatever kills the program next. */
#ifndef HARD_SHOW_H
#define HARD_SHOW_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void show(const char *what, long ret)
{
    printf("%s = %ld", what, ret);
    if (ret < 0)
        printf(" %s", strerrorname_np(errno));
    printf("\n");
    fflush(stdout);
}

#endif
