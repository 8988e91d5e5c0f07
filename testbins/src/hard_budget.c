/* hard_budget MODE - system calls that take long:
 * sleep: nanosleep 100 s; sleepmax: nanosleep INT64_MAX s; random: getrandom of 1 GiB
 * (prints the count one call returned). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "sleep") || !strcmp(mode, "sleepmax")) {
        struct timespec ts = {mode[5] ? INT64_MAX : 100, 0};
        return nanosleep(&ts, NULL) == 0 ? 0 : 3;
    }
    if (!strcmp(mode, "random")) {
        char *buf = malloc(1 << 30);
        long got = getrandom(buf, 1 << 30, 0);
        printf("getrandom = %s\n", got > 0 ? "positive" : "failed");
        return 0;
    }
    return 1;
}
