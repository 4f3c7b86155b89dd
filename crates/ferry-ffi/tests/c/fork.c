/* Handles across fork(): a child gets copies of every handle its parent
 * held and frees the ones it does not use, an RPC server among them; the
 * parent's server keeps its watcher thread and goes on answering calls
 * (made by a second child, with a connection of its own), and each side
 * frees what it holds without an error.
 *
 * Run: ferry_fork */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { CALLS = 200 };

/* Threads of this process. */
static int threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
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
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(rx, &server)); /* consumes rx; starts the watcher thread */
    int before = threads();

    /* A child that uses nothing it inherited: it frees every copy. */
    pid_t idle = fork();
    EXPECT(idle >= 0);
    if (idle == 0) {
        ferry_rpc_server_free(server);
        ferry_send_right_free(tx);
        if (ferry_last_error_message()[0] != '\0') {
            fprintf(stderr, "child: freeing the inherited handles failed: %s\n", ferry_last_error_message());
            _exit(1);
        }
        _exit(0);
    }
    expect_exit_0(idle, "the child freeing its copies");
    int after = threads();
    printf("parent: %d threads before the child freed its copy of the server, %d after\n", before, after);
    EXPECT(after == before);

    /* A child that calls the parent's server over a connection of its own. */
    pid_t client = fork();
    EXPECT(client >= 0);
    if (client == 0) {
        ferry_connection *conn;
        CHECK(ferry_connection_connect(tx, FERRY_POLICY_BLOCK, 10000, &conn));
        ferry_message *m;
        CHECK(ferry_message_new(1, &m));
        for (uint32_t i = 0; i < CALLS; i++) {
            CHECK(ferry_message_reset(m, 1, (const uint8_t *)&i, sizeof i));
            CHECK(ferry_connection_call_in_place(conn, m, 10000));
            const uint8_t *b;
            size_t len;
            CHECK(ferry_message_body(m, &b, &len));
            EXPECT(len == sizeof i && memcmp(b, &i, sizeof i) == 0);
        }
        ferry_message_free(m);
        ferry_connection_free(conn);
        ferry_send_right_free(tx);
        _exit(0);
    }
    ferry_send_right_free(tx);
    ferry_message *m;
    CHECK(ferry_message_new(0, &m));
    int served = 0;
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
        served++;
    }
    expect_exit_0(client, "the calling child");
    ferry_message_free(m);
    ferry_rpc_server_free(server);
    EXPECT(served == CALLS);
    printf("fork: ok, %d calls served after a child freed its copy of the server\n", served);
    return 0;
}
