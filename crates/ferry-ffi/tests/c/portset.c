/* Port sets from C: messages from several ports, no-senders and dead-name
 * events, each reported for the member it concerns; removal hands the
 * receive right back, and a dead-name watch can be stopped.
 *
 * Run: ferry_portset */
#include <stdint.h>
#include <string.h>

#include "check.h"

static void wait_for(ferry_port_set *set, ferry_event_kind want_kind, uint32_t want_member, ferry_message **msg) {
    ferry_event_kind kind;
    uint32_t member;
    ferry_message *m = NULL;
    CHECK(ferry_port_set_wait(set, 10000, &kind, &member, &m));
    if (kind != want_kind || member != want_member) {
        fprintf(stderr, "event %d on member %u, expected %d on %u\n", (int)kind, member, (int)want_kind, want_member);
        exit(1);
    }
    EXPECT((kind == FERRY_EVENT_MESSAGE) == (m != NULL));
    if (msg)
        *msg = m;
    else
        ferry_message_free(m);
}

int main(void) {
    ferry_port_set *set;
    CHECK(ferry_port_set_new(&set));
    ferry_receive_right *rx1, *rx2, *rx3;
    ferry_send_right *tx1, *tx2, *tx3;
    CHECK(ferry_port_new(&rx1, &tx1));
    CHECK(ferry_port_new(&rx2, &tx2));
    CHECK(ferry_port_new(&rx3, &tx3));
    uint32_t m1, m2, w3;
    CHECK(ferry_port_set_insert(set, rx1, &m1)); /* consumed */
    CHECK(ferry_port_set_insert(set, rx2, &m2));
    CHECK(ferry_port_set_watch_dead_name(set, tx3, &w3));
    EXPECT(m1 != m2 && m2 != w3 && m1 != w3);

    ferry_event_kind kind;
    uint32_t member;
    ferry_message *m = NULL;
    EXPECT(ferry_port_set_wait(set, 0, &kind, &member, &m) == FERRY_ERR_TIMEOUT && m == NULL);

    /* A message on the second port is reported for it. */
    CHECK(ferry_message_new(42, &m));
    CHECK(ferry_message_set_body(m, (const uint8_t *)"two", 3));
    CHECK(ferry_send_right_send(tx2, m, 0));
    ferry_message_free(m);
    wait_for(set, FERRY_EVENT_MESSAGE, m2, &m);
    uint32_t op;
    CHECK(ferry_message_op(m, &op));
    EXPECT(op == 42);
    ferry_message_free(m);

    /* The first port loses its only sender. */
    ferry_send_right_free(tx1);
    wait_for(set, FERRY_EVENT_NO_SENDERS, m1, NULL);

    /* The watched port dies: a dead name, once. */
    ferry_receive_right_free(rx3);
    wait_for(set, FERRY_EVENT_DEAD_NAME, w3, NULL);

    /* Removing a port hands its receive right back; a watch is no port. */
    ferry_receive_right *back = NULL;
    CHECK(ferry_port_set_remove(set, m2, &back));
    EXPECT(ferry_port_set_remove(set, m2, &back) == FERRY_ERR_INVALID_ARGUMENT);
    EXPECT(ferry_port_set_remove(set, w3, &back) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_message_new(7, &m));
    CHECK(ferry_send_right_send(tx2, m, 0));
    ferry_message_free(m);
    CHECK(ferry_receive_right_recv(back, 0, &m));
    CHECK(ferry_message_op(m, &op));
    EXPECT(op == 7);
    ferry_message_free(m);

    /* A watch holds a copy of the right: its port sees no senders only
     * once the watch is stopped, and a stopped watch reports nothing. */
    ferry_receive_right *rx4;
    ferry_send_right *tx4;
    CHECK(ferry_port_new(&rx4, &tx4));
    uint32_t w4;
    CHECK(ferry_port_set_watch_dead_name(set, tx4, &w4));
    ferry_send_right_free(tx4);
    m = NULL;
    EXPECT(ferry_receive_right_recv(rx4, 20, &m) == FERRY_ERR_TIMEOUT && m == NULL);
    EXPECT(ferry_port_set_unwatch(set, m2) == FERRY_ERR_INVALID_ARGUMENT); /* removed */
    EXPECT(ferry_port_set_unwatch(set, w3) == FERRY_ERR_INVALID_ARGUMENT); /* reported */
    CHECK(ferry_port_set_unwatch(set, w4));
    EXPECT(ferry_port_set_unwatch(set, w4) == FERRY_ERR_INVALID_ARGUMENT);
    EXPECT(ferry_receive_right_recv(rx4, 10000, &m) == FERRY_ERR_NO_SENDERS && m == NULL);
    ferry_receive_right_free(rx4);
    EXPECT(ferry_port_set_wait(set, 20, &kind, &member, &m) == FERRY_ERR_TIMEOUT && m == NULL);

    ferry_receive_right_free(back);
    ferry_send_right_free(tx2);
    ferry_send_right_free(tx3);
    ferry_port_set_free(set);
    printf("portset: ok\n");
    return 0;
}
