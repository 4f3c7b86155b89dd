/* ferry called while a thread is being torn down: from a thread's
 * pthread_key_create destructor and from an atexit handler, which both
 * run after the thread-local storage of Rust code in the library is
 * gone. A message goes through a port, and a call that fails (an item
 * index past the end) returns its status with some text, in each; no
 * abort. (exit() must not be called again from an atexit handler, so a
 * failure there ends the process with _exit.)
 *
 * Run: ferry_teardown */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static ferry_receive_right *rx;
static ferry_send_right *tx;
static pthread_key_t key;

#define LATE_EXPECT(where, cond)                                                 \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s: expected %s\n", where, #cond);                  \
            fflush(stderr);                                                      \
            _exit(1);                                                            \
        }                                                                        \
    } while (0)

/* A failed call, so that the thread's error text is in use. */
static void fail_once(ferry_message *m) {
    ferry_item_kind k;
    EXPECT(ferry_message_item_kind(m, 3, &k) == FERRY_ERR_INVALID_ARGUMENT);
}

/* What each teardown stage checks: a round trip through the port, then
 * a failing call with its status and a text. */
static void late_calls(const char *where, uint32_t op) {
    ferry_message *m = NULL, *got = NULL;
    LATE_EXPECT(where, ferry_message_new(op, &m) == FERRY_OK);
    LATE_EXPECT(where, ferry_send_right_send(tx, m, 10000) == FERRY_OK);
    LATE_EXPECT(where, ferry_receive_right_recv(rx, 10000, &got) == FERRY_OK);
    uint32_t got_op = 0;
    LATE_EXPECT(where, ferry_message_op(got, &got_op) == FERRY_OK && got_op == op);
    ferry_item_kind k;
    LATE_EXPECT(where, ferry_message_item_kind(got, 5, &k) == FERRY_ERR_INVALID_ARGUMENT);
    const char *text = ferry_last_error_message();
    LATE_EXPECT(where, text != NULL && strlen(text) > 0);
    ferry_message_free(got);
    ferry_message_free(m);
    printf("teardown: %s ok (%s)\n", where, text);
    fflush(stdout);
}

static void key_destructor(void *p) {
    ferry_message_free((ferry_message *)p);
    late_calls("thread key destructor", 2);
}

static void *thread(void *arg) {
    (void)arg;
    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    fail_once(m);
    EXPECT(pthread_setspecific(key, m) == 0);
    return NULL;
}

static void at_exit(void) {
    late_calls("atexit handler", 3);
    ferry_send_right_free(tx);
    ferry_receive_right_free(rx);
}

int main(void) {
    CHECK(ferry_port_new(&rx, &tx));
    EXPECT(pthread_key_create(&key, key_destructor) == 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, thread, NULL) == 0);
    EXPECT(pthread_join(t, NULL) == 0);

    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    fail_once(m);
    ferry_message_free(m);
    EXPECT(atexit(at_exit) == 0);
    printf("teardown: main done\n");
    fflush(stdout);
    return 0;
}
