/* An RPC connection across fork(): the child's copy shares the parent's
 * slot and sequence numbers, so a call through it is refused
 * (FERRY_ERR_INVALID_ARGUMENT, nothing sent) rather than mixing its
 * replies with the parent's; the child calls over a connection of its
 * own, frees its copy of the parent's, and the parent's calls go on
 * answered with their own replies.
 *
 * Run: ferry_fork_conn */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { CALLS = 100 };

/* One echo call on `conn`: op 1 and `i` there, op 2 and `i` back. */
static ferry_status echo(ferry_connection *conn, ferry_message *m, uint32_t i) {
    CHECK(ferry_message_reset(m, 1, (const uint8_t *)&i, sizeof i));
    ferry_status st = ferry_connection_call_in_place(conn, m, 10000);
    if (st != FERRY_OK)
        return st;
    const uint8_t *b;
    size_t len;
    CHECK(ferry_message_body(m, &b, &len));
    EXPECT(len == sizeof i && memcmp(b, &i, sizeof i) == 0);
    return FERRY_OK;
}

static void expect_exit_0(pid_t pid, const char *what) {
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s failed (status %d)\n", what, status);
        exit(1);
    }
}

int main(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    pid_t server_pid = fork();
    EXPECT(server_pid >= 0);
    if (server_pid == 0) {
        ferry_send_right_free(tx);
        ferry_rpc_server *server;
        CHECK(ferry_rpc_server_new(rx, &server));
        ferry_message *m;
        CHECK(ferry_message_new(0, &m));
        for (;;) {
            ferry_status st = ferry_rpc_server_reply_and_wait_in_place(server, m, 10000);
            if (st == FERRY_ERR_NO_CLIENTS)
                break;
            CHECK(st);
            const uint8_t *b;
            size_t len;
            CHECK(ferry_message_body(m, &b, &len));
            uint8_t body[16];
            EXPECT(len <= sizeof body);
            memcpy(body, b, len);
            CHECK(ferry_message_reset(m, 2, body, len));
        }
        ferry_message_free(m);
        ferry_rpc_server_free(server);
        _exit(0);
    }
    ferry_receive_right_free(rx);
    ferry_connection *conn;
    CHECK(ferry_connection_connect(tx, FERRY_POLICY_BLOCK, 10000, &conn));
    ferry_message *m;
    CHECK(ferry_message_new(0, &m));
    CHECK(echo(conn, m, 7));

    pid_t child = fork();
    EXPECT(child >= 0);
    if (child == 0) {
        ferry_status st = echo(conn, m, 1000);
        if (st != FERRY_ERR_INVALID_ARGUMENT) {
            fprintf(stderr, "child: a call through the parent's connection gave %s\n", ferry_status_name(st));
            _exit(1);
        }
        EXPECT(strstr(ferry_last_error_message(), "forked") != NULL);
        ferry_connection *own;
        CHECK(ferry_connection_connect(tx, FERRY_POLICY_BLOCK, 10000, &own));
        for (uint32_t i = 0; i < CALLS; i++)
            CHECK(echo(own, m, 2000 + i));
        ferry_connection_free(own);
        ferry_connection_free(conn); /* the copy: the parent's stays open */
        ferry_message_free(m);
        ferry_send_right_free(tx);
        _exit(0);
    }
    expect_exit_0(child, "the forked child");
    for (uint32_t i = 0; i < CALLS; i++)
        CHECK(echo(conn, m, i));
    ferry_message_free(m);
    ferry_connection_free(conn);
    ferry_send_right_free(tx);
    expect_exit_0(server_pid, "the server");
    printf("fork conn: ok\n");
    return 0;
}
