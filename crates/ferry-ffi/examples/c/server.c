/* The server half of the C client/server example.
 *
 * Registers a port under NAME with the name service, answers one "hello"
 * through the send-once right that came with it (handing the client a send
 * right to an RPC server), then serves RPC calls with reply-and-wait until
 * the client says quit, and finally says goodbye through the send right
 * the client put in its hello.
 *
 * Run: ferry_server NAME   (start ferry_client NAME N beside it) */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

enum { OP_HELLO = 1, OP_WELCOME = 2, OP_ADD = 10, OP_QUIT = 11, OP_BYE = 20 };

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME\n", argv[0]);
        return 2;
    }
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    CHECK(ferry_bootstrap_register(names, argv[1], tx));

    /* The RPC server gets a port of its own. */
    ferry_receive_right *rpc_rx;
    ferry_send_right *rpc_tx;
    CHECK(ferry_port_new(&rpc_rx, &rpc_tx));
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(rpc_rx, &server));

    /* Hello: item 0 is a send right to the client's port; the reply right
     * is a send-once right. */
    ferry_message *hello;
    CHECK(ferry_receive_right_recv(rx, FERRY_TIMEOUT_INFINITE, &hello));
    uint32_t op;
    CHECK(ferry_message_op(hello, &op));
    EXPECT(op == OP_HELLO);
    ferry_credentials who;
    CHECK(ferry_message_sender(hello, &who));
    ferry_item_kind kind;
    CHECK(ferry_message_item_kind(hello, 0, &kind));
    EXPECT(kind == FERRY_ITEM_SEND_RIGHT);
    ferry_send_right *to_client;
    CHECK(ferry_message_take_send_right(hello, 0, &to_client));
    /* A second take of the same item is refused, typed. */
    ferry_send_right *again = NULL;
    EXPECT(ferry_message_take_send_right(hello, 0, &again) == FERRY_ERR_INVALID_ARGUMENT && again == NULL);

    ferry_message *welcome;
    CHECK(ferry_message_new(OP_WELCOME, &welcome));
    CHECK(ferry_message_set_body(welcome, (const uint8_t *)"rpc", 3));
    ferry_send_right *rpc_copy;
    CHECK(ferry_send_right_clone(rpc_tx, &rpc_copy));
    CHECK(ferry_message_add_send_right(welcome, rpc_copy));
    CHECK(ferry_message_reply(hello, welcome, FERRY_TIMEOUT_INFINITE));
    /* The send-once right is spent: a second reply has no right to use. */
    EXPECT(ferry_message_reply(hello, welcome, 0) == FERRY_ERR_NO_REPLY_RIGHT);
    ferry_message_free(welcome);
    ferry_message_free(hello);
    ferry_send_right_free(rpc_tx);

    /* Serve calls: each request is answered by the next reply_and_wait. */
    ferry_message *reply = NULL, *req = NULL;
    unsigned calls = 0;
    for (;;) {
        CHECK(ferry_rpc_server_reply_and_wait(server, reply, FERRY_TIMEOUT_INFINITE, &req));
        ferry_message_free(reply);
        reply = NULL;
        CHECK(ferry_message_op(req, &op));
        const uint8_t *body;
        size_t len;
        CHECK(ferry_message_body(req, &body, &len));
        if (op == OP_QUIT) {
            CHECK(ferry_message_new_reply(req, OP_QUIT, &reply));
            ferry_message_free(req);
            break;
        }
        EXPECT(op == OP_ADD && len == 8);
        uint32_t ab[2], sum;
        memcpy(ab, body, sizeof ab);
        sum = ab[0] + ab[1];
        CHECK(ferry_message_new_reply(req, OP_ADD, &reply));
        CHECK(ferry_message_set_body(reply, (const uint8_t *)&sum, sizeof sum));
        ferry_message_free(req);
        calls++;
    }
    /* Answer the quit; the client may close at once, so no wait for more. */
    ferry_message *next = NULL;
    ferry_status st = ferry_rpc_server_reply_and_wait(server, reply, 0, &next);
    EXPECT(st == FERRY_ERR_TIMEOUT || st == FERRY_ERR_NO_CLIENTS || st == FERRY_OK);
    ferry_message_free(next);
    ferry_message_free(reply);

    /* Goodbye through the client's own send right. */
    ferry_message *bye;
    CHECK(ferry_message_new(OP_BYE, &bye));
    CHECK(ferry_message_set_body(bye, (const uint8_t *)&calls, sizeof calls));
    CHECK(ferry_send_right_send(to_client, bye, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(bye);

    printf("server: hello from pid %d uid %u, served %u calls\n", (int)who.pid, who.uid, calls);
    ferry_send_right_free(to_client);
    ferry_rpc_server_free(server);
    CHECK(ferry_bootstrap_unregister(names, argv[1]));
    ferry_bootstrap_free(names);
    ferry_send_right_free(tx);
    ferry_receive_right_free(rx);
    return 0;
}
