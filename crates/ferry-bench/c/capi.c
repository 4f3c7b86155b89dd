/* The C side of the benchmark impls that go through ferry's C API
 * (`ferry-c-port`, `ferry-c-call-poll`, `ferry-c-call-block`): C code calling
 * the functions of include/ferry.h as a C program would. The build script of
 * ferry-bench compiles this file; the C API itself is linked in from the
 * same source as libferry (the `ferry-ffi-rlib` package).
 *
 * The harness (Rust) forks the server, which runs one of the *_serve loops
 * below, and times each call of a client step (*_roundtrip, *_call); all the
 * work of a round trip happens here, in C. Every function returns a
 * ferry_status (FERRY_OK is 0); a reply of the wrong size is
 * FERRY_ERR_INVALID_ARGUMENT with its text in ferry_bench_c_error(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

enum { OP_CALL = 1, OP_STOP = 2 };

static _Thread_local char bench_error[128];

/* The last error this file itself found (a wrong reply), if any. */
const char *ferry_bench_c_error(void) { return bench_error; }

static ferry_status wrong_reply(void) {
    static const char text[] = "a reply of the wrong size";
    memcpy(bench_error, text, sizeof text);
    return FERRY_ERR_INVALID_ARGUMENT;
}

#define TRY(call)                           \
    do {                                    \
        ferry_status try_st_ = (call);      \
        if (try_st_ != FERRY_OK)            \
            return try_st_;                 \
    } while (0)

/* ---- port round trip: a request on one port, the reply on another ---- */

/* Server (the forked peer): answers each request on `rx` with `n` bytes on
 * `to_client` until a request with operation OP_STOP. Consumes nothing. */
ferry_status ferry_bench_c_port_serve(ferry_receive_right *rx, const ferry_send_right *to_client, size_t n) {
    ferry_message *req, *reply;
    uint8_t *body = malloc(n ? n : 1);
    if (body == NULL)
        return FERRY_ERR_IO;
    memset(body, 2, n);
    ferry_status st = ferry_message_new(0, &req);
    if (st != FERRY_OK) {
        free(body);
        return st;
    }
    st = ferry_message_new(OP_CALL, &reply);
    if (st != FERRY_OK) {
        ferry_message_free(req);
        free(body);
        return st;
    }
    for (;;) {
        st = ferry_receive_right_recv_into(rx, req, FERRY_TIMEOUT_INFINITE);
        if (st != FERRY_OK)
            break;
        uint32_t op;
        st = ferry_message_op(req, &op);
        if (st != FERRY_OK || op == OP_STOP)
            break;
        st = ferry_message_reset(reply, op, body, n);
        if (st == FERRY_OK)
            st = ferry_send_right_send(to_client, reply, FERRY_TIMEOUT_INFINITE);
        if (st != FERRY_OK)
            break;
    }
    ferry_message_free(reply);
    ferry_message_free(req);
    free(body);
    return st;
}

/* Client side of the port round trip. */
struct ferry_bench_c_port {
    const ferry_send_right *to_server;
    ferry_receive_right *mine;
    ferry_message *req, *reply;
    uint8_t *body;
    size_t n;
};

/* Opens the client of a port round trip of `n` bytes each way: requests go
 * to `to_server`, replies arrive on `mine`. Borrows both until
 * ferry_bench_c_port_close. */
ferry_status ferry_bench_c_port_open(const ferry_send_right *to_server, ferry_receive_right *mine, size_t n, struct ferry_bench_c_port **out) {
    struct ferry_bench_c_port *c = calloc(1, sizeof *c);
    if (c == NULL)
        return FERRY_ERR_IO;
    c->to_server = to_server;
    c->mine = mine;
    c->n = n;
    c->body = malloc(n ? n : 1);
    if (c->body == NULL) {
        free(c);
        return FERRY_ERR_IO;
    }
    memset(c->body, 1, n);
    ferry_status st = ferry_message_new(OP_CALL, &c->req);
    if (st == FERRY_OK)
        st = ferry_message_new(0, &c->reply);
    if (st != FERRY_OK) {
        ferry_message_free(c->req);
        free(c->body);
        free(c);
        return st;
    }
    *out = c;
    return FERRY_OK;
}

/* One round trip: a request of n bytes out, the reply of n bytes back. */
ferry_status ferry_bench_c_port_roundtrip(struct ferry_bench_c_port *c) {
    TRY(ferry_message_reset(c->req, OP_CALL, c->body, c->n));
    TRY(ferry_send_right_send(c->to_server, c->req, FERRY_TIMEOUT_INFINITE));
    TRY(ferry_receive_right_recv_into(c->mine, c->reply, FERRY_TIMEOUT_INFINITE));
    const uint8_t *got;
    size_t len;
    TRY(ferry_message_body(c->reply, &got, &len));
    if (len != c->n)
        return wrong_reply();
    return FERRY_OK;
}

/* Tells the server to stop and frees the client (not the borrowed rights). */
ferry_status ferry_bench_c_port_close(struct ferry_bench_c_port *c) {
    ferry_status st = ferry_message_reset(c->req, OP_STOP, NULL, 0);
    if (st == FERRY_OK)
        st = ferry_send_right_send(c->to_server, c->req, FERRY_TIMEOUT_INFINITE);
    ferry_message_free(c->reply);
    ferry_message_free(c->req);
    free(c->body);
    free(c);
    return st;
}

/* ---- RPC round trip through the fast path ---- */

/* Server (the forked peer): an RPC server on `rx` (consumed) with `policy`
 * answering each call with `n` bytes, until a call with OP_STOP (answered)
 * or until no client is left. */
ferry_status ferry_bench_c_rpc_serve(ferry_receive_right *rx, uint32_t policy, size_t n) {
    ferry_rpc_server *server;
    TRY(ferry_rpc_server_new(rx, &server));
    ferry_status st = ferry_rpc_server_set_policy(server, policy);
    uint8_t *body = malloc(n ? n : 1);
    ferry_message *msg = NULL; /* the reply out, the next request in */
    if (body == NULL)
        st = FERRY_ERR_IO;
    else
        memset(body, 2, n);
    if (st == FERRY_OK)
        st = ferry_message_new(0, &msg);
    while (st == FERRY_OK) {
        st = ferry_rpc_server_reply_and_wait_in_place(server, msg, FERRY_TIMEOUT_INFINITE);
        if (st != FERRY_OK)
            break;
        uint32_t op;
        st = ferry_message_op(msg, &op);
        if (st == FERRY_OK)
            st = ferry_message_reset(msg, op, body, n);
        if (st == FERRY_OK && op == OP_STOP) {
            /* Sends the last reply; the client has hung up or hangs up
             * next, so the wait after it ends either way. */
            st = ferry_rpc_server_reply_and_wait_in_place(server, msg, 0);
            if (st == FERRY_ERR_TIMEOUT || st == FERRY_ERR_NO_CLIENTS)
                st = FERRY_OK;
            break;
        }
    }
    if (st == FERRY_ERR_NO_CLIENTS)
        st = FERRY_OK;
    ferry_message_free(msg);
    free(body);
    ferry_rpc_server_free(server);
    return st;
}

/* Client side of the RPC round trip. */
struct ferry_bench_c_rpc {
    ferry_connection *conn;
    ferry_message *msg; /* the request out, the reply in */
    uint8_t *body;
    size_t n;
};

/* Connects to the server behind `server` (borrowed) with `policy`, for
 * calls of `n` bytes each way. */
ferry_status ferry_bench_c_rpc_open(const ferry_send_right *server, uint32_t policy, size_t n, struct ferry_bench_c_rpc **out) {
    struct ferry_bench_c_rpc *c = calloc(1, sizeof *c);
    if (c == NULL)
        return FERRY_ERR_IO;
    c->n = n;
    c->body = malloc(n ? n : 1);
    if (c->body == NULL) {
        free(c);
        return FERRY_ERR_IO;
    }
    memset(c->body, 1, n);
    ferry_status st = ferry_connection_connect(server, policy, FERRY_TIMEOUT_INFINITE, &c->conn);
    if (st == FERRY_OK)
        st = ferry_message_new(OP_CALL, &c->msg);
    if (st != FERRY_OK) {
        ferry_connection_free(c->conn);
        free(c->body);
        free(c);
        return st;
    }
    *out = c;
    return FERRY_OK;
}

/* One call: a request of n bytes, a reply of n bytes checked for size. */
ferry_status ferry_bench_c_rpc_call(struct ferry_bench_c_rpc *c) {
    TRY(ferry_message_reset(c->msg, OP_CALL, c->body, c->n));
    TRY(ferry_connection_call_in_place(c->conn, c->msg, FERRY_TIMEOUT_INFINITE));
    const uint8_t *got;
    size_t len;
    TRY(ferry_message_body(c->msg, &got, &len));
    if (len != c->n)
        return wrong_reply();
    return FERRY_OK;
}

/* Stops the server (a call with OP_STOP) and frees the client. */
ferry_status ferry_bench_c_rpc_close(struct ferry_bench_c_rpc *c) {
    ferry_status st = ferry_message_reset(c->msg, OP_STOP, NULL, 0);
    if (st == FERRY_OK)
        st = ferry_connection_call_in_place(c->conn, c->msg, FERRY_TIMEOUT_INFINITE);
    ferry_message_free(c->msg);
    ferry_connection_free(c->conn);
    free(c->body);
    free(c);
    return st;
}
