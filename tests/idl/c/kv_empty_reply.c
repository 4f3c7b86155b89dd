/* The store's C client given replies with an empty body, as the
 * documentation calls it: the result and error structs are locals the
 * caller did not initialise (filled with 0xAB here, what such a local may
 * hold). A server (a thread of this program, answering the version check
 * with the generated dispatcher) answers `get` with OK and `put` with its
 * typed error, neither with a value. Every call fails with
 * FERRY_IDL_BAD_REPLY and leaves the structs safe to free. Prints
 * "kv-empty-reply-ok".
 *
 * Run: kv_empty_reply CALLS */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "expect.h"

static ferry_receive_right *server_rx;

static void *serve(void *arg) {
    (void)arg;
    kv_server_ops ops;
    memset(&ops, 0, sizeof ops);
    for (;;) {
        ferry_message *req, *rep = NULL;
        if (ferry_receive_right_recv(server_rx, 10000, &req) != FERRY_OK)
            return NULL; /* the client is gone */
        uint32_t op;
        EXPECT(ferry_message_op(req, &op) == FERRY_OK);
        if (op == 0) {
            int ran;
            rep = kv_dispatch(&ops, NULL, req, &ran);
        } else {
            /* OK to `get`, the typed error to `put`: no value follows. */
            EXPECT(ferry_message_new(op == KV_OP_PUT ? FERRY_IDL_REPLY_ERR : FERRY_IDL_REPLY_OK, &rep) == FERRY_OK);
        }
        EXPECT(rep != NULL);
        EXPECT(ferry_message_reply(req, rep, 10000) == FERRY_OK);
        ferry_message_free(rep);
        ferry_message_free(req);
    }
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    int calls = atoi(argv[1]);
    ferry_send_right *to_server;
    EXPECT(ferry_port_new(&server_rx, &to_server) == FERRY_OK);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, serve, NULL) == 0);
    kv_client *c;
    EXPECT(kv_connect_port(to_server, 10000, &c) == FERRY_OK);
    ferry_idl_bytes key = {(uint8_t *)"key", 3};
    for (int i = 0; i < calls; i++) {
        kv_opt_region_by_value got;
        memset(&got, 0xAB, sizeof got);
        EXPECT(kv_get(c, &key, &got) == FERRY_IDL_BAD_REPLY);
        kv_free_opt_region_by_value(&got);

        ferry_region *region;
        EXPECT(ferry_region_new(1, &region) == FERRY_OK);
        ferry_idl_region value = {region, NULL};
        kv_opt_u64 replaced;
        kv_kv_error err;
        memset(&replaced, 0xAB, sizeof replaced);
        memset(&err, 0xAB, sizeof err);
        EXPECT(kv_put(c, &key, &value, &replaced, &err) == FERRY_IDL_BAD_REPLY);
        kv_free_kv_error(&err);
        ferry_region_free(region);
    }
    kv_client_free(c);
    EXPECT(pthread_join(t, NULL) == 0);
    ferry_receive_right_free(server_rx);
    printf("kv-empty-reply-ok\n");
    return 0;
}
