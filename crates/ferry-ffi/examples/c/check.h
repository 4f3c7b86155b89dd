/* Error handling shared by the C examples: every ferry call returns a
 * ferry_status; on failure, say which call failed and why, and exit. */
#ifndef FERRY_EXAMPLE_CHECK_H
#define FERRY_EXAMPLE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "ferry.h"

#define CHECK(call)                                                              \
    do {                                                                         \
        ferry_status check_st_ = (call);                                         \
        if (check_st_ != FERRY_OK) {                                             \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,   \
                    ferry_status_name(check_st_), ferry_last_error_message());   \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#define EXPECT(cond)                                                             \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);  \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#endif
