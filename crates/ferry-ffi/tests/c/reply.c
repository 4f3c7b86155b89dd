/* Reply pairs from C: a send-once right made without a port travels as a
 * request's reply right and its one answer reaches the reply receiver; a
 * right freed unused is reported, then nothing more; a right whose
 * receiver is gone fails to send. Descriptors are counted before and
 * after a loop of all of that.
 *
 * Run: ferry_reply */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "fds.h"

static void round_trip(ferry_receive_right *server, ferry_send_right *to_server, uint32_t i) {
    ferry_reply_receiver *answer;
    ferry_send_once_right *once;
    CHECK(ferry_reply_pair_new(&answer, &once));
    ferry_message *m = NULL;
    EXPECT(ferry_reply_receiver_recv(answer, 0, &m) == FERRY_ERR_TIMEOUT && m == NULL);

    ferry_message *req;
    CHECK(ferry_message_new(1, &req));
    CHECK(ferry_message_set_body(req, (const uint8_t *)&i, sizeof i));
    CHECK(ferry_message_set_reply_send_once(req, once)); /* consumed */
    CHECK(ferry_send_right_send(to_server, req, 0));
    ferry_message_free(req);

    CHECK(ferry_receive_right_recv(server, 10000, &req));
    ferry_message *rep;
    CHECK(ferry_message_new(2, &rep));
    CHECK(ferry_message_set_body(rep, (const uint8_t *)&i, sizeof i));
    CHECK(ferry_message_reply(req, rep, 0));
    ferry_message_free(rep);
    ferry_message_free(req);

    CHECK(ferry_reply_receiver_recv(answer, 10000, &m));
    uint32_t op;
    CHECK(ferry_message_op(m, &op));
    const uint8_t *body;
    size_t len;
    CHECK(ferry_message_body(m, &body, &len));
    EXPECT(op == 2 && len == sizeof i && memcmp(body, &i, sizeof i) == 0);
    ferry_message_free(m);
    m = NULL;
    EXPECT(ferry_reply_receiver_recv(answer, 0, &m) == FERRY_ERR_NO_SENDERS && m == NULL);
    ferry_reply_receiver_free(answer);

    /* Freed unused: the receiver hears it once. */
    CHECK(ferry_reply_pair_new(&answer, &once));
    ferry_send_once_right_free(once);
    EXPECT(ferry_reply_receiver_recv(answer, 10000, &m) == FERRY_ERR_SEND_ONCE_DROPPED && m == NULL);
    EXPECT(ferry_reply_receiver_recv(answer, 10000, &m) == FERRY_ERR_NO_SENDERS && m == NULL);
    ferry_reply_receiver_free(answer);

    /* The receiver gone: the right's one send fails. */
    CHECK(ferry_reply_pair_new(&answer, &once));
    ferry_reply_receiver_free(answer);
    CHECK(ferry_message_new(3, &m));
    EXPECT(ferry_send_once_right_send(once, m, 0) == FERRY_ERR_PEER_DEAD);
    ferry_message_free(m);
}

int main(void) {
    ferry_receive_right *server;
    ferry_send_right *to_server;
    CHECK(ferry_port_new(&server, &to_server));
    round_trip(server, to_server, 0);
    int before = open_fds();
    for (uint32_t i = 1; i <= 200; i++)
        round_trip(server, to_server, i);
    EXPECT(open_fds() == before);
    ferry_send_right_free(to_server);
    ferry_receive_right_free(server);
    EXPECT(ferry_reply_receiver_recv(NULL, 0, NULL) == FERRY_ERR_NULL);
    printf("reply: ok\n");
    return 0;
}
