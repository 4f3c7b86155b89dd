/* The store's generated port server (a thread of this program) running
 * functions that return neither 0 nor 1, as a C function that failed
 * often does: -1 from `put` (which has a typed error) and `remove`, 2 from
 * `list`. A return value the operation does not define has neither a
 * result nor a typed error to send: each call is answered with fault 4
 * (FERRY_IDL_FAULT_REPLY_TOO_LARGE, the implementation's answer cannot be
 * sent), never with a success carrying a result the function did not set.
 * Prints "kv-bad-rc-ok".
 *
 * Run: kv_bad_rc CALLS */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "expect.h"

static int put(void *ctx, ferry_idl_bytes *key, ferry_idl_region *value, kv_opt_u64 *result, kv_kv_error *error) {
    (void)ctx, (void)key, (void)value, (void)result, (void)error;
    return -1;
}

static int remove_key(void *ctx, ferry_idl_bytes *key, bool *result) {
    (void)ctx, (void)key, (void)result;
    return -1;
}

static int list(void *ctx, kv_list_entry *result) {
    (void)ctx, (void)result;
    return 2;
}

static ferry_receive_right *server_rx;

static void *serve(void *arg) {
    (void)arg;
    static const kv_server_ops OPS = {.put = put, .remove = remove_key, .list = list};
    EXPECT(kv_serve_port(&OPS, NULL, server_rx, 10000) == FERRY_OK);
    return NULL;
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
        bool removed = true;
        int r = kv_remove(c, &key, &removed);
        if (r != FERRY_IDL_FAULT || c->fault_code != FERRY_IDL_FAULT_REPLY_TOO_LARGE) {
            fprintf(stderr, "remove returned %d (fault %u, removed %d)\n", r, c->fault_code, removed);
            exit(1);
        }

        ferry_region *region;
        EXPECT(ferry_region_new(1, &region) == FERRY_OK);
        ferry_idl_region value = {region, NULL};
        kv_opt_u64 replaced;
        kv_kv_error err;
        r = kv_put(c, &key, &value, &replaced, &err);
        if (r != FERRY_IDL_FAULT || c->fault_code != FERRY_IDL_FAULT_REPLY_TOO_LARGE) {
            fprintf(stderr, "put returned %d (fault %u)\n", r, c->fault_code);
            exit(1);
        }
        ferry_region_free(region);

        kv_list_entry entries;
        r = kv_list(c, &entries);
        if (r != FERRY_IDL_FAULT || c->fault_code != FERRY_IDL_FAULT_REPLY_TOO_LARGE) {
            fprintf(stderr, "list returned %d (fault %u)\n", r, c->fault_code);
            exit(1);
        }
    }
    kv_client_free(c);
    EXPECT(pthread_join(t, NULL) == 0);
    ferry_receive_right_free(server_rx);
    printf("kv-bad-rc-ok\n");
    return 0;
}
