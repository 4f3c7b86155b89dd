/* Round trips through the C API, for comparison with the Rust API (run by
 * `cargo run --release -p ferry-ffi --example c_bench`, which measures the
 * Rust side the same way in the same run).
 *
 * Three cases, each a server thread and a client (this thread) in one
 * process: a port null round trip (a message with a send-once reply right
 * there, the empty reply back), and RPC calls of 8 bytes each way with the
 * poll and block policies. Prints one JSON record per case in the
 * benchmark schema (docs/bench/), one per line.
 *
 * With --pin, the client runs on CPU 0 and every server thread on CPU 1
 * (placement "cross-core"); otherwise the scheduler places them
 * ("unpinned").
 *
 * Run: ferry_c_bench ITERS [--pin] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int pinned;

/* Pins the calling thread to `cpu` when --pin was given. */
static void pin(int cpu) {
    if (!pinned)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    EXPECT(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *suite, const char *case_, const char *impl, int bytes, uint64_t *ns, size_t n) {
    qsort(ns, n, sizeof *ns, cmp_u64);
    printf("{\"suite\":\"%s\",\"case\":\"%s\",\"impl\":\"%s\",\"bytes\":%d,\"placement\":\"%s\",\"touch\":\"none\","
           "\"iters\":%zu,\"median_ns\":%.1f,\"p99_ns\":%.1f,\"min_ns\":%.1f,\"gbps\":null,\"extra\":{\"peer\":\"thread\",\"api\":\"c\"}}\n",
           suite, case_, impl, bytes, pinned ? "cross-core" : "unpinned", n, (double)ns[n / 2], (double)ns[n * 99 / 100], (double)ns[0]);
    fflush(stdout);
}

enum { WARM_UP = 1000, OP_CALL = 1, OP_STOP = 2 };

/* ---- port round trip ---- */

static void *port_server(void *arg) {
    ferry_receive_right *rx = arg;
    pin(1);
    ferry_message *reply, *req;
    CHECK(ferry_message_new(0, &reply));
    CHECK(ferry_message_new(0, &req));
    for (;;) {
        CHECK(ferry_receive_right_recv_into(rx, req, FERRY_TIMEOUT_INFINITE));
        uint32_t op;
        CHECK(ferry_message_op(req, &op));
        CHECK(ferry_message_reply(req, reply, FERRY_TIMEOUT_INFINITE));
        if (op == OP_STOP)
            break;
    }
    ferry_message_free(req);
    ferry_message_free(reply);
    ferry_receive_right_free(rx);
    return NULL;
}

static void port_roundtrip(size_t iters, uint64_t *ns) {
    ferry_receive_right *srv_rx, *mine;
    ferry_send_right *srv_tx, *unused;
    CHECK(ferry_port_new(&srv_rx, &srv_tx));
    CHECK(ferry_port_new(&mine, &unused));
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, port_server, srv_rx) == 0);
    ferry_message *m, *r;
    CHECK(ferry_message_new(OP_CALL, &m));
    CHECK(ferry_message_new(0, &r));
    for (size_t i = 0; i < WARM_UP + iters; i++) {
        int last = i + 1 == WARM_UP + iters;
        uint64_t t0 = now_ns();
        ferry_send_once_right *once;
        CHECK(ferry_message_set_op(m, last ? OP_STOP : OP_CALL));
        CHECK(ferry_receive_right_make_send_once(mine, &once));
        CHECK(ferry_message_set_reply_send_once(m, once));
        CHECK(ferry_send_right_send(srv_tx, m, FERRY_TIMEOUT_INFINITE));
        CHECK(ferry_receive_right_recv_into(mine, r, FERRY_TIMEOUT_INFINITE));
        if (i >= WARM_UP)
            ns[i - WARM_UP] = now_ns() - t0;
    }
    ferry_message_free(r);
    ferry_message_free(m);
    EXPECT(pthread_join(t, NULL) == 0);
    ferry_send_right_free(srv_tx);
    ferry_send_right_free(unused);
    ferry_receive_right_free(mine);
}

/* ---- RPC round trip ---- */

struct rpc_args {
    ferry_receive_right *rx;
    uint32_t policy;
};

static void *rpc_serve(void *arg) {
    struct rpc_args *a = arg;
    pin(1);
    ferry_rpc_server *server;
    CHECK(ferry_rpc_server_new(a->rx, &server));
    CHECK(ferry_rpc_server_set_policy(server, a->policy));
    const uint8_t body[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    ferry_message *msg; /* the reply out, the next request in */
    CHECK(ferry_message_new(0, &msg));
    for (;;) {
        CHECK(ferry_rpc_server_reply_and_wait_in_place(server, msg, FERRY_TIMEOUT_INFINITE));
        uint32_t op;
        CHECK(ferry_message_op(msg, &op));
        CHECK(ferry_message_reset(msg, op, body, sizeof body));
        if (op == OP_STOP)
            break;
    }
    ferry_status st = ferry_rpc_server_reply_and_wait_in_place(server, msg, 0);
    EXPECT(st == FERRY_ERR_TIMEOUT || st == FERRY_ERR_NO_CLIENTS);
    ferry_message_free(msg);
    ferry_rpc_server_free(server);
    return NULL;
}

static void rpc_roundtrip(uint32_t policy, size_t iters, uint64_t *ns) {
    struct rpc_args a = {NULL, policy};
    ferry_send_right *tx;
    CHECK(ferry_port_new(&a.rx, &tx));
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, rpc_serve, &a) == 0);
    ferry_connection *conn;
    CHECK(ferry_connection_connect(tx, policy, FERRY_TIMEOUT_INFINITE, &conn));
    const uint8_t body[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    ferry_message *m; /* the request out, the reply in */
    CHECK(ferry_message_new(OP_CALL, &m));
    for (size_t i = 0; i < WARM_UP + iters; i++) {
        int last = i + 1 == WARM_UP + iters;
        uint64_t t0 = now_ns();
        CHECK(ferry_message_reset(m, last ? OP_STOP : OP_CALL, body, sizeof body));
        CHECK(ferry_connection_call_in_place(conn, m, FERRY_TIMEOUT_INFINITE));
        const uint8_t *got;
        size_t len;
        CHECK(ferry_message_body(m, &got, &len));
        EXPECT(len == 8 && got[0] == 2);
        if (i >= WARM_UP)
            ns[i - WARM_UP] = now_ns() - t0;
    }
    ferry_message_free(m);
    ferry_connection_free(conn);
    EXPECT(pthread_join(t, NULL) == 0);
    ferry_send_right_free(tx);
}

int main(int argc, char **argv) {
    size_t iters = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
    pinned = argc > 2 && strcmp(argv[2], "--pin") == 0;
    pin(0);
    EXPECT(iters > 0);
    uint64_t *ns = malloc(iters * sizeof *ns);
    EXPECT(ns != NULL);
    port_roundtrip(iters, ns);
    report("port", "null-roundtrip", "ferry-c-port", 0, ns, iters);
    rpc_roundtrip(FERRY_POLICY_POLL, iters, ns);
    report("rpc", "roundtrip", "ferry-c-call-poll", 8, ns, iters);
    rpc_roundtrip(FERRY_POLICY_BLOCK, iters, ns);
    report("rpc", "roundtrip", "ferry-c-call-block", 8, ns, iters);
    free(ns);
    return 0;
}
