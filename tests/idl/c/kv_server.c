/* The example key-value store in C, through the stubs ferry-idl-c generates
 * from tests/idl/example.kv.json (tests/tests/idl_c.rs runs the Rust client
 * against it): values kept in regions of their own, handed out by value
 * (copy-on-write). Registers NAME (its port) and NAME.rpc (its RPC
 * server), prints "ready", serves both until every client is gone, then
 * prints "served N requests".
 *
 * Run: kv_server NAME */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

#define CHECK(call)                                                                  \
    do {                                                                             \
        int check_st_ = (call);                                                      \
        if (check_st_ != FERRY_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s: %d (%s)\n", __FILE__, __LINE__, #call,       \
                    check_st_, ferry_last_error_message());                          \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define MAX_KEYS 64
#define MAX_VALUE (64ull << 20)

struct store {
    pthread_mutex_t lock;
    char *keys[MAX_KEYS];
    ferry_region *values[MAX_KEYS];
    size_t lens[MAX_KEYS];
    unsigned long requests;
};

static int find(struct store *s, const ferry_idl_bytes *key) {
    for (int i = 0; i < MAX_KEYS; i++)
        if (s->keys[i] != NULL && strlen(s->keys[i]) == key->len && memcmp(s->keys[i], key->data, key->len) == 0)
            return i;
    return -1;
}

static int put(void *ctx, ferry_idl_bytes *key, ferry_idl_region *value, kv_opt_u64 *result, kv_kv_error *error) {
    struct store *s = ctx;
    const uint8_t *view;
    size_t len;
    pthread_mutex_lock(&s->lock);
    s->requests++;
    int rc = 1;
    if (key->len == 0) {
        error->tag = KV_KV_ERROR_EMPTY_KEY;
    } else if (ferry_mapped_region_data(value->in, &view, &len) != FERRY_OK) {
        error->tag = KV_KV_ERROR_NO_MEMORY;
    } else if (len > MAX_VALUE) {
        error->tag = KV_KV_ERROR_TOO_LARGE;
        error->u.too_large = MAX_VALUE;
    } else {
        ferry_region *copy;
        uint8_t *bytes;
        size_t got;
        int i = find(s, key);
        if (ferry_region_new(len, &copy) != FERRY_OK || ferry_region_data(copy, &bytes, &got) != FERRY_OK) {
            error->tag = KV_KV_ERROR_NO_MEMORY;
        } else {
            memcpy(bytes, view, len);
            result->present = i >= 0;
            if (i >= 0) {
                result->value = s->lens[i];
                ferry_region_free(s->values[i]);
            } else {
                for (i = 0; i < MAX_KEYS && s->keys[i] != NULL; i++)
                    ;
                if (i == MAX_KEYS) {
                    ferry_region_free(copy);
                    error->tag = KV_KV_ERROR_NO_MEMORY;
                    pthread_mutex_unlock(&s->lock);
                    return 1;
                }
                s->keys[i] = strdup((const char *)key->data);
            }
            s->values[i] = copy;
            s->lens[i] = len;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int get(void *ctx, ferry_idl_bytes *key, kv_opt_region_by_value *result) {
    struct store *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->requests++;
    int i = find(s, key);
    result->present = i >= 0;
    if (i >= 0)
        result->value.out = s->values[i]; /* sent by copy; stays the store's */
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static int remove_key(void *ctx, ferry_idl_bytes *key, bool *result) {
    struct store *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->requests++;
    int i = find(s, key);
    *result = i >= 0;
    if (i >= 0) {
        free(s->keys[i]);
        ferry_region_free(s->values[i]);
        s->keys[i] = NULL;
        s->values[i] = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static int list(void *ctx, kv_list_entry *result) {
    struct store *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->requests++;
    result->items = calloc(MAX_KEYS, sizeof *result->items);
    result->len = 0;
    for (int i = 0; result->items != NULL && i < MAX_KEYS; i++) {
        if (s->keys[i] == NULL)
            continue;
        kv_entry *e = &result->items[result->len++];
        e->key.len = strlen(s->keys[i]);
        e->key.data = (uint8_t *)strdup(s->keys[i]); /* freed by the dispatcher after sending */
        e->len = s->lens[i];
    }
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static const kv_server_ops OPS = {.put = put, .get = get, .remove = remove_key, .list = list};
static struct store STORE = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *serve_port(void *rx) {
    CHECK(kv_serve_port(&OPS, &STORE, rx, FERRY_TIMEOUT_INFINITE));
    ferry_receive_right_free(rx);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME\n", argv[0]);
        return 2;
    }
    ferry_receive_right *port_rx, *rpc_rx;
    ferry_send_right *port_tx, *rpc_tx;
    CHECK(ferry_port_new(&port_rx, &port_tx));
    CHECK(ferry_port_new(&rpc_rx, &rpc_tx));
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(rpc_rx, &server));
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    char rpc_name[200];
    snprintf(rpc_name, sizeof rpc_name, "%s.rpc", argv[1]);
    CHECK(ferry_bootstrap_register(names, argv[1], port_tx));
    CHECK(ferry_bootstrap_register(names, rpc_name, rpc_tx));
    ferry_send_right_free(port_tx);
    ferry_send_right_free(rpc_tx);
    printf("ready\n");
    fflush(stdout);
    pthread_t t;
    if (pthread_create(&t, NULL, serve_port, port_rx) != 0)
        return 1;
    CHECK(kv_serve_rpc(&OPS, &STORE, server, FERRY_TIMEOUT_INFINITE));
    pthread_join(t, NULL);
    ferry_rpc_server_free(server);
    ferry_bootstrap_free(names);
    printf("served %lu requests\n", STORE.requests);
    return 0;
}
