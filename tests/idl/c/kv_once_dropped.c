/* The generated port server goes on past a send-once right to its port
 * that was freed unused (FERRY_ERR_SEND_ONCE_DROPPED is about a right
 * this program made, say as the reply right of a request of its own that
 * its peer never answered; no request is lost), as the Rust serve_port
 * does: a right made on the store's port and freed unused comes first,
 * then a client connects (the version check is served) and goes, and
 * serve_port ends with FERRY_OK when no sender is left. Prints
 * "kv-once-dropped-ok".
 *
 * Run: kv_once_dropped */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "kv.h"

#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: expected %s (%s)\n", __FILE__, __LINE__, #cond,  \
                    ferry_last_error_message());                                     \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static const kv_server_ops OPS = {0};
static ferry_status served;

static void *serve(void *rx) {
    served = kv_serve_port(&OPS, NULL, rx, 10000);
    return NULL;
}

int main(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx;
    EXPECT(ferry_port_new(&rx, &tx) == FERRY_OK);
    ferry_send_once_right *once;
    EXPECT(ferry_receive_right_make_send_once(rx, &once) == FERRY_OK);
    ferry_send_once_right_free(once);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, serve, rx) == 0);
    kv_client *c = NULL;
    int st = kv_connect_port(tx, 10000, &c); /* consumes tx */
    if (st != FERRY_OK)
        fprintf(stderr, "connect: %d (%s)\n", st, ferry_last_error_message());
    kv_client_free(c);
    pthread_join(t, NULL);
    if (served != FERRY_OK)
        fprintf(stderr, "serve_port: %d\n", (int)served);
    EXPECT(st == FERRY_OK && served == FERRY_OK);
    ferry_receive_right_free(rx);
    printf("kv-once-dropped-ok\n");
    return 0;
}
