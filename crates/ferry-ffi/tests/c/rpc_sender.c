/* Who calls an RPC server: every request, through the shared slot or over
 * the socket (a call carrying a right), names its client's pid, uid and
 * gid, so a server can check who asks before it acts.
 *
 * Run: ferry_rpc_sender */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { CALLS = 20 };

static int client(const ferry_send_right *to_server) {
    ferry_connection *conn;
    CHECK(ferry_connection_connect(to_server, FERRY_POLICY_BLOCK, 10000, &conn));
    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    for (uint32_t i = 0; i < CALLS; i++) {
        CHECK(ferry_message_reset(m, 1, (const uint8_t *)&i, sizeof i));
        if (i % 2) { /* a right in the call: it goes over the socket */
            ferry_send_right *copy;
            CHECK(ferry_send_right_clone(to_server, &copy));
            CHECK(ferry_message_add_send_right(m, copy));
        }
        CHECK(ferry_connection_call_in_place(conn, m, 10000));
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
    ferry_message *m;
    CHECK(ferry_message_new(0, &m));
    int served = 0, named = 0;
    for (;;) {
        ferry_status st = ferry_rpc_server_reply_and_wait_in_place(server, m, 10000);
        if (st == FERRY_ERR_NO_CLIENTS)
            break;
        CHECK(st);
        ferry_credentials who;
        st = ferry_message_sender(m, &who);
        if (st == FERRY_OK && who.pid == pid && who.uid == getuid() && who.gid == getgid())
            named++;
        else if (served == 0)
            printf("request %d: %s (%s)\n", served, ferry_status_name(st), ferry_last_error_message());
        CHECK(ferry_message_reset(m, 2, NULL, 0));
        served++;
    }
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ferry_message_free(m);
    ferry_rpc_server_free(server);
    printf("rpc sender: %d of %d requests named their client\n", named, served);
    EXPECT(served == CALLS && named == CALLS);
    printf("rpc sender: ok\n");
    return 0;
}
