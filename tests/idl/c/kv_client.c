/* The example key-value store's client in C, through the stubs ferry-idl-c
 * generates from tests/idl/example.kv.json (tests/tests/idl_c.rs runs it
 * against the Rust store): every operation, a typed error, a by-value
 * region both ways, a missing key and the listing, over the port NAME and
 * over an RPC connection to NAME.rpc. Prints "kv-c-client-ok".
 *
 * Run: kv_client NAME */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv.h"
#include "expect.h"

#define CHECK(call)                                                                  \
    do {                                                                             \
        int check_st_ = (call);                                                      \
        if (check_st_ != FERRY_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s: %d (%s)\n", __FILE__, __LINE__, #call,       \
                    check_st_, ferry_last_error_message());                          \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static ferry_send_right *lookup(ferry_bootstrap *names, const char *name) {
    ferry_send_right *r = NULL;
    for (int i = 0; i < 6000 && ferry_bootstrap_lookup(names, name, &r) == FERRY_ERR_NAME_NOT_FOUND; i++) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    EXPECT(r != NULL);
    return r;
}

static ferry_region *region_of(const char *text) {
    ferry_region *r;
    uint8_t *bytes;
    size_t len;
    CHECK(ferry_region_new(strlen(text), &r));
    CHECK(ferry_region_data(r, &bytes, &len));
    memcpy(bytes, text, strlen(text));
    return r;
}

static ferry_idl_bytes str(const char *s) {
    ferry_idl_bytes b = {(uint8_t *)s, strlen(s)};
    return b;
}

static void script(kv_client *c, const char *tag) {
    char key_text[64], value_text[64];
    snprintf(key_text, sizeof key_text, "c-%s", tag);
    snprintf(value_text, sizeof value_text, "value from C over %s", tag);
    ferry_idl_bytes key = str(key_text);
    ferry_region *value = region_of(value_text);

    ferry_idl_region arg = {value, NULL};
    kv_opt_u64 replaced;
    kv_kv_error err;
    CHECK(kv_put(c, &key, &arg, &replaced, &err));
    EXPECT(!replaced.present);
    CHECK(kv_put(c, &key, &arg, &replaced, &err));
    EXPECT(replaced.present && replaced.value == strlen(value_text));

    kv_opt_region_by_value got;
    CHECK(kv_get(c, &key, &got));
    EXPECT(got.present);
    const uint8_t *view;
    size_t len;
    CHECK(ferry_mapped_region_data(got.value.in, &view, &len));
    EXPECT(len == strlen(value_text) && memcmp(view, value_text, len) == 0);
    kv_free_opt_region_by_value(&got);

    ferry_idl_bytes empty = str("");
    EXPECT(kv_put(c, &empty, &arg, &replaced, &err) == FERRY_IDL_APP_ERROR);
    EXPECT(err.tag == KV_KV_ERROR_EMPTY_KEY);

    kv_list_entry list;
    CHECK(kv_list(c, &list));
    int found = 0;
    for (size_t i = 0; i < list.len; i++)
        found |= list.items[i].key.len == key.len && memcmp(list.items[i].key.data, key.data, key.len) == 0 &&
                 list.items[i].len == strlen(value_text);
    EXPECT(found);
    kv_free_list_entry(&list);

    bool was;
    CHECK(kv_remove(c, &key, &was));
    EXPECT(was);
    CHECK(kv_remove(c, &key, &was));
    EXPECT(!was);
    CHECK(kv_get(c, &key, &got));
    EXPECT(!got.present);
    ferry_region_free(value);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME\n", argv[0]);
        return 2;
    }
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    char rpc_name[200];
    snprintf(rpc_name, sizeof rpc_name, "%s.rpc", argv[1]);

    kv_client *by_port;
    CHECK(kv_connect_port(lookup(names, argv[1]), 30000, &by_port));
    EXPECT(by_port->peer_version == KV_VERSION);
    script(by_port, "port");
    kv_client_free(by_port);

    ferry_send_right *rpc = lookup(names, rpc_name);
    ferry_connection *conn;
    CHECK(ferry_connection_connect(rpc, FERRY_POLICY_ADAPTIVE, 30000, &conn));
    ferry_send_right_free(rpc);
    kv_client *by_rpc;
    CHECK(kv_connect_rpc(conn, 30000, &by_rpc));
    script(by_rpc, "rpc");
    kv_client_free(by_rpc);
    ferry_bootstrap_free(names);
    printf("kv-c-client-ok\n");
    return 0;
}
