/* The check the C test programs of the typed interfaces share: a failed
 * expectation prints where and what, and exits 1. */
#ifndef FERRY_IDL_TEST_EXPECT_H
#define FERRY_IDL_TEST_EXPECT_H

#include <stdio.h>
#include <stdlib.h>

#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);      \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#endif
