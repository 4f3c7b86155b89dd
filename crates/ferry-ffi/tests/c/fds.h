/* What the C tests share beyond check.h: counting this process's open
 * descriptors, to show a loop of calls leaves none behind. */
#ifndef FERRY_TEST_FDS_H
#define FERRY_TEST_FDS_H

#include <dirent.h>

/* Entries of /proc/self/fd (including the one the count itself opens). */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

#endif
