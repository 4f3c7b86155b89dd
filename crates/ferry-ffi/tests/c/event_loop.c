/* ferry in a C event loop: each receiving handle gives one descriptor that
 * polls readable exactly when a call with a zero timeout has something to
 * return; poll(2) stands for any loop (epoll, libuv, libevent). A receive
 * right (messages and a dropped send-once right), a reply receiver, a port
 * set, and an RPC server serving a forked client, all without a blocking
 * call; a send right's descriptor polls writable while its queue has room.
 *
 * Run: ferry_event_loop */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fds.h"

enum { CALLS = 50 };

/* What poll says of `fd` within `ms` milliseconds. */
static short events(int fd, short want, int ms) {
    struct pollfd p = {.fd = fd, .events = want};
    int n = poll(&p, 1, ms);
    EXPECT(n >= 0);
    return n ? p.revents : 0;
}

static void send_op(const ferry_send_right *to, uint32_t op) {
    ferry_message *m;
    CHECK(ferry_message_new(op, &m));
    CHECK(ferry_send_right_send(to, m, 0));
    ferry_message_free(m);
}

static uint32_t op_of(ferry_message *m) {
    uint32_t op;
    CHECK(ferry_message_op(m, &op));
    ferry_message_free(m);
    return op;
}

static void receive_right(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    int fd = -1;
    CHECK(ferry_receive_right_fd(rx, &fd));
    EXPECT(fd >= 0);
    EXPECT(events(fd, POLLIN, 0) == 0);
    send_op(tx, 1);
    EXPECT(events(fd, POLLIN, 10000) & POLLIN);
    ferry_message *m;
    CHECK(ferry_receive_right_recv(rx, 0, &m));
    EXPECT(op_of(m) == 1);
    EXPECT(ferry_receive_right_recv(rx, 0, &m) == FERRY_ERR_TIMEOUT);
    EXPECT(events(fd, POLLIN, 0) == 0);
    /* A send-once right made later is watched by the same descriptor. */
    ferry_send_once_right *once;
    CHECK(ferry_receive_right_make_send_once(rx, &once));
    int again;
    CHECK(ferry_receive_right_fd(rx, &again));
    EXPECT(again == fd);
    EXPECT(events(fd, POLLIN, 0) == 0);
    ferry_send_once_right_free(once);
    EXPECT(events(fd, POLLIN, 10000) & POLLIN);
    EXPECT(ferry_receive_right_recv(rx, 0, &m) == FERRY_ERR_SEND_ONCE_DROPPED);
    /* A send right's descriptor is writable while the queue has room. */
    int wfd;
    CHECK(ferry_send_right_fd(tx, &wfd));
    EXPECT(events(wfd, POLLOUT, 0) & POLLOUT);
    ferry_send_right_free(tx);
    EXPECT(events(fd, POLLIN, 10000) & POLLIN);
    EXPECT(ferry_receive_right_recv(rx, 0, &m) == FERRY_ERR_NO_SENDERS);
    ferry_receive_right_free(rx);
}

static void reply_receiver(void) {
    ferry_reply_receiver *answer;
    ferry_send_once_right *once;
    CHECK(ferry_reply_pair_new(&answer, &once));
    int fd;
    CHECK(ferry_reply_receiver_fd(answer, &fd));
    EXPECT(events(fd, POLLIN, 0) == 0);
    ferry_message *m;
    CHECK(ferry_message_new(4, &m));
    CHECK(ferry_send_once_right_send(once, m, 0));
    ferry_message_free(m);
    EXPECT(events(fd, POLLIN, 10000) & POLLIN);
    CHECK(ferry_reply_receiver_recv(answer, 0, &m));
    EXPECT(op_of(m) == 4);
    ferry_reply_receiver_free(answer);
}

static void port_set(void) {
    ferry_port_set *set;
    CHECK(ferry_port_set_new(&set));
    ferry_receive_right *a, *b;
    ferry_send_right *to_a, *to_b;
    CHECK(ferry_port_new(&a, &to_a));
    CHECK(ferry_port_new(&b, &to_b));
    uint32_t ma, mb;
    CHECK(ferry_port_set_insert(set, a, &ma));
    CHECK(ferry_port_set_insert(set, b, &mb));
    int fd;
    CHECK(ferry_port_set_fd(set, &fd));
    EXPECT(events(fd, POLLIN, 0) == 0);
    send_op(to_b, 2);
    EXPECT(events(fd, POLLIN, 10000) & POLLIN);
    ferry_event_kind kind;
    uint32_t member;
    ferry_message *m;
    CHECK(ferry_port_set_wait(set, 0, &kind, &member, &m));
    EXPECT(kind == FERRY_EVENT_MESSAGE && member == mb && op_of(m) == 2);
    EXPECT(ferry_port_set_wait(set, 0, &kind, &member, &m) == FERRY_ERR_TIMEOUT);
    EXPECT(events(fd, POLLIN, 0) == 0);
    ferry_send_right_free(to_a);
    ferry_send_right_free(to_b);
    ferry_port_set_free(set);
}

static void rpc_server(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ferry_receive_right_free(rx);
        ferry_connection *conn;
        CHECK(ferry_connection_connect(tx, FERRY_POLICY_ADAPTIVE, 10000, &conn));
        ferry_message *m;
        CHECK(ferry_message_new(0, &m));
        for (uint32_t i = 0; i < CALLS; i++) {
            CHECK(ferry_message_reset(m, i, NULL, 0));
            CHECK(ferry_connection_call_in_place(conn, m, 10000));
            uint32_t op;
            CHECK(ferry_message_op(m, &op));
            EXPECT(op == i + 1);
        }
        ferry_message_free(m);
        ferry_connection_free(conn);
        ferry_send_right_free(tx);
        _exit(0);
    }
    ferry_send_right_free(tx);
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(rx, &server));
    int fd;
    CHECK(ferry_rpc_server_fd(server, &fd));
    ferry_message *m;
    CHECK(ferry_message_new(0, &m));
    int served = 0, polls = 0;
    for (;;) {
        /* Readable: call with a zero timeout until it says FERRY_ERR_TIMEOUT. */
        ferry_status st = ferry_rpc_server_reply_and_wait_in_place(server, m, 0);
        if (st == FERRY_ERR_TIMEOUT) {
            EXPECT(events(fd, POLLIN, 10000) & POLLIN);
            polls++;
            continue;
        }
        if (st == FERRY_ERR_NO_CLIENTS)
            break;
        CHECK(st);
        uint32_t op;
        CHECK(ferry_message_op(m, &op));
        CHECK(ferry_message_reset(m, op + 1, NULL, 0));
        served++;
    }
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(served == CALLS && polls > 0);
    ferry_message_free(m);
    ferry_rpc_server_free(server);
}

int main(void) {
    receive_right();
    int before = open_fds();
    for (int i = 0; i < 50; i++) {
        receive_right();
        reply_receiver();
        port_set();
    }
    EXPECT(open_fds() == before);
    EXPECT(ferry_receive_right_fd(NULL, NULL) == FERRY_ERR_NULL);
    rpc_server();
    printf("event loop: ok\n");
    return 0;
}
