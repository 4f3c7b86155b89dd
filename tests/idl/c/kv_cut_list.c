/* The store's C client given replies to `list` that do not decode: a
 * server (a thread of this program, answering the version check with the
 * generated dispatcher) answers each `list` with two entries, the second
 * cut short after its key. Every call fails with FERRY_IDL_BAD_REPLY and
 * frees what it decoded: the test builds this with AddressSanitizer,
 * whose leak check fails the program at exit otherwise. Prints
 * "kv-cut-list-ok".
 *
 * Run: kv_cut_list CALLS */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "expect.h"

static ferry_receive_right *server_rx;

static int list_unused(void *ctx, kv_list_entry *result) {
    (void)ctx;
    (void)result;
    return 0;
}

static uint8_t *put_u16(uint8_t *p, uint16_t v) {
    memcpy(p, &v, 2);
    return p + 2;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
    return p + 4;
}

/* One entry, a record: its length, then the key (field 1, a string) and
 * `len` (field 2, a u64) of which only `len_bytes` bytes are there. */
static uint8_t *put_entry(uint8_t *p, const char *key, uint32_t len_bytes) {
    uint8_t *at = p;
    p += 4;
    uint32_t n = (uint32_t)strlen(key);
    p = put_u16(p, 1);
    p = put_u32(p, 4 + n);
    p = put_u32(p, n);
    memcpy(p, key, n);
    p += n;
    p = put_u16(p, 2);
    p = put_u32(p, len_bytes);
    memset(p, 0, len_bytes);
    p += len_bytes;
    put_u32(at, (uint32_t)(p - at - 4));
    return p;
}

static void *serve(void *arg) {
    (void)arg;
    kv_server_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.list = list_unused;
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
            uint8_t body[128], *p = put_u32(body, 2);
            p = put_entry(p, "whole", 8);
            p = put_entry(p, "cut-short", 3);
            EXPECT(ferry_message_new(FERRY_IDL_REPLY_OK, &rep) == FERRY_OK);
            EXPECT(ferry_message_set_body(rep, body, (size_t)(p - body)) == FERRY_OK);
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
    for (int i = 0; i < calls; i++) {
        kv_list_entry entries;
        memset(&entries, 0, sizeof entries);
        int st = kv_list(c, &entries);
        EXPECT(st == FERRY_IDL_BAD_REPLY);
        EXPECT(entries.items == NULL && entries.len == 0);
    }
    kv_client_free(c);
    EXPECT(pthread_join(t, NULL) == 0);
    ferry_receive_right_free(server_rx);
    printf("kv-cut-list-ok\n");
    return 0;
}
