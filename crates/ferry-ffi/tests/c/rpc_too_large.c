/* A reply too large to travel fails its client's call (FERRY_ERR_TOO_LARGE
 * there) and the server goes on: both forms of reply-and-wait send it and
 * return the next request, as for a client that has gone, so a serving
 * loop that stops on any other failure keeps serving.
 *
 * Run: ferry_rpc_too_large */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static uint8_t big[FERRY_MAX_INLINE + 1];

static int client(const ferry_send_right *to_server) {
    ferry_connection *conn;
    CHECK(ferry_connection_connect(to_server, FERRY_POLICY_BLOCK, 10000, &conn));
    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    for (uint32_t i = 0; i < 4; i++) {
        CHECK(ferry_message_reset(m, 1, (const uint8_t *)&i, sizeof i));
        ferry_status st = ferry_connection_call_in_place(conn, m, 10000);
        if (i % 2 == 0) { /* answered with a body too large to travel */
            EXPECT(st == FERRY_ERR_TOO_LARGE);
            continue;
        }
        CHECK(st);
        const uint8_t *body;
        size_t len;
        CHECK(ferry_message_body(m, &body, &len));
        EXPECT(len == sizeof i && memcmp(body, &i, sizeof i) == 0);
    }
    ferry_message_free(m);
    ferry_connection_free(conn);
    return 0;
}

int main(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ferry_receive_right_free(rx);
        int r = client(tx);
        ferry_send_right_free(tx);
        _exit(r);
    }
    ferry_send_right_free(tx);
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(rx, &server));
    /* Requests 0 and 1 in place, 2 and 3 with a reply handle of their own. */
    ferry_message *m;
    CHECK(ferry_message_new(0, &m));
    CHECK(ferry_rpc_server_reply_and_wait_in_place(server, m, 10000));
    CHECK(ferry_message_reset(m, 2, big, sizeof big));
    CHECK(ferry_rpc_server_reply_and_wait_in_place(server, m, 10000));
    const uint8_t *body;
    size_t len;
    CHECK(ferry_message_body(m, &body, &len));
    uint32_t n;
    EXPECT(len == sizeof n);
    memcpy(&n, body, sizeof n);
    EXPECT(n == 1);
    CHECK(ferry_message_reset(m, 2, (const uint8_t *)&n, sizeof n));
    ferry_message *req = NULL, *reply = NULL;
    CHECK(ferry_rpc_server_reply_and_wait_in_place(server, m, 10000));
    CHECK(ferry_message_new_reply(m, 2, &reply));
    CHECK(ferry_message_set_body(reply, big, sizeof big));
    CHECK(ferry_rpc_server_reply_and_wait(server, reply, 10000, &req));
    CHECK(ferry_message_body(req, &body, &len));
    EXPECT(len == sizeof n);
    memcpy(&n, body, sizeof n);
    EXPECT(n == 3);
    ferry_message_free(reply);
    CHECK(ferry_message_new_reply(req, 2, &reply));
    CHECK(ferry_message_set_body(reply, (const uint8_t *)&n, sizeof n));
    ferry_message_free(req);
    ferry_message *none = NULL;
    EXPECT(ferry_rpc_server_reply_and_wait(server, reply, 10000, &none) == FERRY_ERR_NO_CLIENTS);
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ferry_message_free(reply);
    ferry_message_free(m);
    ferry_rpc_server_free(server);
    printf("rpc too large: ok\n");
    return 0;
}
