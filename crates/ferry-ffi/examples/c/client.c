/* The client half of the C client/server example.
 *
 * Looks NAME up, sends "hello" with a send right to a port of its own and
 * a send-once right for the answer, gets back a send right to the server's
 * RPC port, makes N calls through the fast path, and waits for the
 * server's goodbye on its own port.
 *
 * Run: ferry_client NAME N   (with ferry_server NAME running) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>

#include "check.h"

enum { OP_HELLO = 1, OP_WELCOME = 2, OP_ADD = 10, OP_QUIT = 11, OP_BYE = 20 };

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME N\n", argv[0]);
        return 2;
    }
    unsigned n = (unsigned)strtoul(argv[2], NULL, 10);

    /* The server may still be starting: wait for its name, boundedly. */
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_send_right *to_server = NULL;
    ferry_status found = ferry_bootstrap_lookup_wait(names, argv[1], 10000, &to_server);
    if (found == FERRY_ERR_NAME_NOT_FOUND) {
        fprintf(stderr, "client: no server registered %s within 10 s; start `ferry_server %s` first\n", argv[1], argv[1]);
        return 1;
    }
    CHECK(found);

    ferry_receive_right *mine;
    ferry_send_right *to_me;
    CHECK(ferry_port_new(&mine, &to_me));
    ferry_send_once_right *answer;
    CHECK(ferry_receive_right_make_send_once(mine, &answer));

    ferry_message *hello;
    CHECK(ferry_message_new(OP_HELLO, &hello));
    CHECK(ferry_message_set_body(hello, (const uint8_t *)"hello", 5));
    CHECK(ferry_message_add_send_right(hello, to_me)); /* consumed */
    CHECK(ferry_message_set_reply_send_once(hello, answer)); /* consumed */
    CHECK(ferry_send_right_send(to_server, hello, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(hello);

    ferry_message *welcome;
    CHECK(ferry_receive_right_recv(mine, FERRY_TIMEOUT_INFINITE, &welcome));
    uint32_t op;
    CHECK(ferry_message_op(welcome, &op));
    EXPECT(op == OP_WELCOME);
    ferry_send_right *to_rpc;
    CHECK(ferry_message_take_send_right(welcome, 0, &to_rpc));
    ferry_message_free(welcome);

    ferry_connection *conn;
    CHECK(ferry_connection_connect(to_rpc, FERRY_POLICY_ADAPTIVE, FERRY_TIMEOUT_INFINITE, &conn));
    ferry_message *req, *rep;
    for (unsigned i = 0; i < n; i++) {
        uint32_t ab[2] = {i, 3 * i + 1}, sum;
        CHECK(ferry_message_new(OP_ADD, &req));
        CHECK(ferry_message_set_body(req, (const uint8_t *)ab, sizeof ab));
        CHECK(ferry_connection_call(conn, req, FERRY_TIMEOUT_INFINITE, &rep));
        const uint8_t *body;
        size_t len;
        CHECK(ferry_message_body(rep, &body, &len));
        EXPECT(len == sizeof sum);
        memcpy(&sum, body, sizeof sum);
        EXPECT(sum == ab[0] + ab[1]);
        ferry_message_free(rep);
        ferry_message_free(req);
    }
    CHECK(ferry_message_new(OP_QUIT, &req));
    CHECK(ferry_connection_call(conn, req, FERRY_TIMEOUT_INFINITE, &rep));
    ferry_message_free(rep);
    ferry_message_free(req);
    ferry_connection_free(conn);

    ferry_message *bye;
    CHECK(ferry_receive_right_recv(mine, FERRY_TIMEOUT_INFINITE, &bye));
    CHECK(ferry_message_op(bye, &op));
    EXPECT(op == OP_BYE);
    const uint8_t *body;
    size_t len;
    unsigned served;
    CHECK(ferry_message_body(bye, &body, &len));
    EXPECT(len == sizeof served);
    memcpy(&served, body, sizeof served);
    EXPECT(served == n);
    ferry_message_free(bye);

    printf("client: ok, %u calls answered\n", n);
    ferry_send_right_free(to_rpc);
    ferry_send_right_free(to_server);
    ferry_receive_right_free(mine);
    ferry_bootstrap_free(names);
    return 0;
}
