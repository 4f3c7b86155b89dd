/* Misuse of the C API gets typed errors, never a crash or a leak: NULL
 * arguments, indices past the end, items of the wrong kind, unknown flags,
 * limits broken, sends to dead ports, no name server. Descriptors are
 * counted before and after a loop of failing operations.
 *
 * Run: ferry_misuse   (with FERRY_BOOTSTRAP pointing nowhere, FERRY_NO_EMBED=1) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fds.h"

#define IS(call, status)                                                                      \
    do {                                                                                      \
        ferry_status is_st_ = (call);                                                         \
        if (is_st_ != (status)) {                                                             \
            fprintf(stderr, "%s:%d: %s gave %s, not %s (%s)\n", __FILE__, __LINE__, #call,    \
                    ferry_status_name(is_st_), #status, ferry_last_error_message());          \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static ferry_message *msg(uint32_t op) {
    ferry_message *m;
    CHECK(ferry_message_new(op, &m));
    return m;
}

/* One round of operations that fail, each checked for its status. */
static void failing_round(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx, *tx2;
    CHECK(ferry_port_new(&rx, &tx));
    CHECK(ferry_send_right_clone(tx, &tx2));

    /* A message with rights and a region, sent to a dead port. */
    ferry_receive_right *dead_rx;
    ferry_send_right *dead_tx;
    CHECK(ferry_port_new(&dead_rx, &dead_tx));
    ferry_receive_right_free(dead_rx);
    bool dead;
    CHECK(ferry_send_right_is_dead(dead_tx, &dead));
    EXPECT(dead);
    CHECK(ferry_send_right_wait_dead(dead_tx, 0));
    ferry_message *m = msg(5);
    ferry_region *region;
    CHECK(ferry_region_new(1 << 16, &region));
    CHECK(ferry_message_add_region_copy(m, region));
    CHECK(ferry_message_add_send_right(m, tx2));
    CHECK(ferry_message_set_body(m, (const uint8_t *)"x", 1));
    IS(ferry_send_right_send(dead_tx, m, 0), FERRY_ERR_PEER_DEAD);
    EXPECT(strstr(ferry_last_error_message(), "dead") != NULL);
    /* Nothing was sent: the handle holds all it held, to send again. */
    size_t held;
    CHECK(ferry_message_item_count(m, &held));
    EXPECT(held == 2);
    CHECK(ferry_message_set_body(m, (const uint8_t *)"again", 5));
    CHECK(ferry_send_right_send(tx, m, 0));
    ferry_message_free(m);
    CHECK(ferry_receive_right_recv(rx, 0, &m));
    CHECK(ferry_message_item_count(m, &held));
    EXPECT(held == 2);
    ferry_message_free(m);
    ferry_send_right_free(dead_tx);

    /* Over the limits. */
    m = msg(6);
    static uint8_t big[FERRY_MAX_INLINE + 1];
    CHECK(ferry_message_set_body(m, big, sizeof big));
    IS(ferry_send_right_send(tx, m, 0), FERRY_ERR_TOO_LARGE);
    ferry_message_free(m);
    m = msg(7);
    for (int i = 0; i < FERRY_MAX_ITEMS; i++) {
        CHECK(ferry_send_right_clone(tx, &tx2));
        CHECK(ferry_message_add_send_right(m, tx2));
    }
    CHECK(ferry_send_right_clone(tx, &tx2));
    IS(ferry_message_add_send_right(m, tx2), FERRY_ERR_TOO_LARGE); /* consumed anyway */
    ferry_message_free(m);

    /* Items: past the end, wrong kind (left in place), taken twice. */
    ferry_region *r2;
    CHECK(ferry_region_new(4096, &r2));
    m = msg(9);
    CHECK(ferry_send_right_clone(tx, &tx2));
    CHECK(ferry_message_add_send_right(m, tx2));
    CHECK(ferry_message_add_region_move(m, r2));
    CHECK(ferry_send_right_send(tx, m, 0));
    /* Sent: the handle is empty, its operation id kept. */
    size_t count;
    uint32_t op;
    CHECK(ferry_message_item_count(m, &count));
    CHECK(ferry_message_op(m, &op));
    EXPECT(count == 0 && op == 9);
    ferry_message_free(m);
    CHECK(ferry_receive_right_recv(rx, 0, &m));
    ferry_item_kind kind;
    IS(ferry_message_item_kind(m, 2, &kind), FERRY_ERR_INVALID_ARGUMENT);
    ferry_receive_right *not_rx = NULL;
    IS(ferry_message_take_receive_right(m, 0, &not_rx), FERRY_ERR_INVALID_ARGUMENT);
    EXPECT(not_rx == NULL);
    CHECK(ferry_message_item_kind(m, 0, &kind));
    EXPECT(kind == FERRY_ITEM_SEND_RIGHT);
    ferry_mapped_region *map = NULL;
    IS(ferry_message_map_region(m, 1, 0x100, &map), FERRY_ERR_INVALID_ARGUMENT);
    IS(ferry_message_map_region(m, 0, 0, &map), FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_message_item_kind(m, 1, &kind));
    EXPECT(kind == FERRY_ITEM_REGION && map == NULL);
    CHECK(ferry_message_map_region(m, 1, FERRY_MAP_IMMEDIATE, &map));
    CHECK(ferry_message_item_kind(m, 1, &kind));
    EXPECT(kind == FERRY_ITEM_TAKEN);
    IS(ferry_message_map_region(m, 1, 0, &map), FERRY_ERR_INVALID_ARGUMENT);
    uint8_t four[4];
    IS(ferry_mapped_region_read(map, 4094, four, 4), FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_mapped_region_read(map, 4092, four, 4));
    ferry_mapped_region_free(map);
    /* Not a request of an RPC server, and no reply right. */
    ferry_message *reply = NULL;
    IS(ferry_message_new_reply(m, 1, &reply), FERRY_ERR_NO_REPLY_RIGHT);
    reply = msg(1);
    IS(ferry_message_reply(m, reply, 0), FERRY_ERR_NO_REPLY_RIGHT);
    IS(ferry_message_reply(m, m, 0), FERRY_ERR_INVALID_ARGUMENT);
    ferry_message_free(reply);
    ferry_credentials who;
    CHECK(ferry_message_sender(m, &who));
    /* A received message keeps its sender when its operation id changes
     * and when it is emptied for reuse, as when its body changes. */
    CHECK(ferry_message_set_op(m, 8));
    who.pid = 0;
    CHECK(ferry_message_sender(m, &who));
    EXPECT(who.pid == getpid());
    CHECK(ferry_message_set_body(m, (const uint8_t *)"b", 1));
    CHECK(ferry_message_sender(m, &who));
    CHECK(ferry_message_reset(m, 9, NULL, 0));
    who.pid = 0;
    CHECK(ferry_message_sender(m, &who));
    EXPECT(who.pid == getpid());
    ferry_message_free(m);
    m = msg(1);
    IS(ferry_message_sender(m, &who), FERRY_ERR_INVALID_ARGUMENT);
    ferry_message_free(m);

    /* Nothing queued; then no senders at all. */
    IS(ferry_receive_right_recv(rx, 0, &m), FERRY_ERR_TIMEOUT);
    ferry_send_right_free(tx);
    IS(ferry_receive_right_recv(rx, FERRY_TIMEOUT_INFINITE, &m), FERRY_ERR_NO_SENDERS);
    ferry_receive_right_free(rx);
    ferry_region_free(region);
}

int main(void) {
    /* NULL everywhere it is not allowed. */
    ferry_send_right *tx = NULL;
    IS(ferry_port_new(NULL, &tx), FERRY_ERR_NULL);
    EXPECT(tx == NULL && strstr(ferry_last_error_message(), "out_receive") != NULL);
    IS(ferry_send_right_send(NULL, NULL, 0), FERRY_ERR_NULL);
    IS(ferry_message_new(1, NULL), FERRY_ERR_NULL);
    IS(ferry_message_set_body(NULL, NULL, 0), FERRY_ERR_NULL);
    ferry_message *m = msg(1);
    IS(ferry_message_set_body(m, NULL, 3), FERRY_ERR_NULL);
    CHECK(ferry_message_set_body(m, NULL, 0));
    IS(ferry_message_add_send_right(m, NULL), FERRY_ERR_NULL);
    ferry_message_free(m);
    IS(ferry_bootstrap_register(NULL, NULL, NULL), FERRY_ERR_NULL);
    IS(ferry_bootstrap_register_system(NULL, NULL, NULL), FERRY_ERR_NULL);
    ferry_wire_parsed parsed;
    IS(ferry_wire_parse(NULL, 4, 0, &parsed, NULL), FERRY_ERR_NULL);
    ferry_wire_error werr;
    IS(ferry_wire_parse(NULL, 0, 0, &parsed, &werr), FERRY_ERR_BAD_MESSAGE);
    EXPECT(werr.kind == FERRY_WIRE_TRUNCATED && werr.a == 24 && werr.b == 0);
    /* Freeing NULL is a no-op. */
    ferry_message_free(NULL);
    ferry_send_right_free(NULL);
    ferry_send_once_right_free(NULL);
    ferry_receive_right_free(NULL);
    ferry_region_free(NULL);
    ferry_mapped_region_free(NULL);
    ferry_connection_free(NULL);
    ferry_rpc_server_free(NULL);
    ferry_port_set_free(NULL);
    ferry_bootstrap_free(NULL);

    /* A body set from the message's own body (trimming it in place), as
     * set_body and reset: the bytes are copied as they were before. */
    m = msg(1);
    static uint8_t pattern[4096];
    for (size_t i = 0; i < sizeof pattern; i++)
        pattern[i] = (uint8_t)(i * 7 + i / 251);
    CHECK(ferry_message_set_body(m, pattern, sizeof pattern));
    const uint8_t *own;
    size_t own_len;
    size_t from = 0;
    for (size_t shift = 1; shift < 64; shift += 9) {
        CHECK(ferry_message_body(m, &own, &own_len));
        CHECK(ferry_message_set_body(m, own + shift, own_len - shift));
        from += shift;
        CHECK(ferry_message_body(m, &own, &own_len));
        EXPECT(own_len == sizeof pattern - from && memcmp(own, pattern + from, own_len) == 0);
    }
    CHECK(ferry_message_reset(m, 2, own + 5, 100));
    CHECK(ferry_message_body(m, &own, &own_len));
    EXPECT(own_len == 100 && memcmp(own, pattern + from + 5, 100) == 0);
    ferry_message_free(m);

    /* Bad values. */
    ferry_region *r = NULL;
    IS(ferry_region_new(0, &r), FERRY_ERR_INVALID_ARGUMENT);
    EXPECT(r == NULL);
    EXPECT(strcmp(ferry_status_name(9999), "FERRY_ERR_UNKNOWN") == 0);
    EXPECT(strcmp(ferry_status_name(FERRY_ERR_PEER_DEAD), "FERRY_ERR_PEER_DEAD") == 0);
    EXPECT(strcmp(ferry_wire_error_name(-1), "Unknown") == 0);
    ferry_receive_right *rx;
    CHECK(ferry_port_new(&rx, &tx));
    ferry_connection *conn = NULL;
    IS(ferry_connection_connect(tx, 7, 0, &conn), FERRY_ERR_INVALID_ARGUMENT);
    EXPECT(conn == NULL);
    /* An RPC reply must name the request it answers. */
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(rx, &server));
    m = msg(1);
    ferry_message *req = NULL;
    IS(ferry_rpc_server_reply_and_wait(server, m, 0, &req), FERRY_ERR_NO_REPLY_RIGHT);
    IS(ferry_rpc_server_reply_and_wait(server, NULL, 0, &req), FERRY_ERR_TIMEOUT);
    ferry_message_free(m);
    ferry_rpc_server_free(server);
    ferry_send_right_free(tx);

    /* No name server, none may be started: a typed error. */
    ferry_bootstrap *names = NULL;
    IS(ferry_bootstrap_connect(&names), FERRY_ERR_UNAVAILABLE);
    EXPECT(names == NULL);

    /* The same failures, many times: no descriptor may stay behind. */
    failing_round();
    int before = open_fds();
    for (int i = 0; i < 100; i++)
        failing_round();
    int after = open_fds();
    if (after != before) {
        fprintf(stderr, "descriptors leaked: %d before, %d after\n", before, after);
        return 1;
    }
    printf("misuse: ok (%d descriptors before and after)\n", before);
    return 0;
}
