/* A system service every user reaches, written in C: registered with
 * ferry_bootstrap_register_system_service (as root), so that each user's
 * lookup gets a port of its own and no user can shut down or fill the port
 * another user calls. The name server sends each such port to the
 * service's main port in a FERRY_SERVICE_PORT message; the service takes
 * it with ferry_message_take_service_port and serves it in a port set, as
 * the port of the user it names. Every call is answered with the uid of
 * the user whose port it came on, whatever its sender says.
 *
 * Run (as root): ferry_system_service NAME PORTS
 * Serves until PORTS ports made for lookups have lost their last sender,
 * then prints a summary and exits. */
#include <stdint.h>
#include <string.h>

#include "check.h"

/* The most ports this example serves at once (a real service would also
 * bound how many one user may have). */
#define MAX_PORTS 64

struct served {
    uint32_t member;
    uint32_t uid;
};

/* A message shaped like the name server's, sent by this process to
 * itself with a reply right, is not a service port: the message is left
 * whole. */
static void refuses_the_wrong_shape(void) {
    ferry_receive_right *rx, *fake_rx;
    ferry_send_right *tx, *fake_tx;
    ferry_reply_receiver *answer;
    ferry_send_once_right *once;
    CHECK(ferry_port_new(&rx, &tx));
    CHECK(ferry_port_new(&fake_rx, &fake_tx));
    CHECK(ferry_reply_pair_new(&answer, &once));
    ferry_message *m;
    uint32_t uid = 0;
    CHECK(ferry_message_new(FERRY_SERVICE_PORT, &m));
    CHECK(ferry_message_set_body(m, (const uint8_t *)&uid, sizeof uid));
    CHECK(ferry_message_add_receive_right(m, fake_rx)); /* consumed */
    CHECK(ferry_message_add_send_right(m, fake_tx));
    CHECK(ferry_message_set_reply_send_once(m, once));
    CHECK(ferry_send_right_send(tx, m, 0));
    ferry_message_free(m);
    CHECK(ferry_receive_right_recv(rx, 10000, &m));
    ferry_receive_right *port = (ferry_receive_right *)1;
    uid = 12345;
    CHECK(ferry_message_take_service_port(m, &uid, &port));
    size_t items = 0;
    CHECK(ferry_message_item_count(m, &items));
    EXPECT(port == NULL && uid == 12345 && items == 2);
    ferry_message_free(m);
    ferry_reply_receiver_free(answer);
    ferry_receive_right_free(rx);
    ferry_send_right_free(tx);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME PORTS\n", argv[0]);
        return 2;
    }
    unsigned long want = strtoul(argv[2], NULL, 10);
    refuses_the_wrong_shape();

    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_receive_right *main_rx;
    ferry_send_right *main_tx;
    CHECK(ferry_port_new(&main_rx, &main_tx));
    CHECK(ferry_bootstrap_register_system_service(names, argv[1], main_tx));
    /* The name server keeps its own copy; the service needs none. */
    ferry_send_right_free(main_tx);

    ferry_port_set *set;
    CHECK(ferry_port_set_new(&set));
    uint32_t main_member;
    CHECK(ferry_port_set_insert(set, main_rx, &main_member)); /* consumed */
    printf("serving %s\n", argv[1]);
    fflush(stdout);

    struct served ports[MAX_PORTS];
    size_t live = 0;
    unsigned long closed = 0, calls = 0, ignored = 0;
    while (closed < want) {
        ferry_event_kind kind;
        uint32_t member;
        ferry_message *m = NULL;
        CHECK(ferry_port_set_wait(set, 30000, &kind, &member, &m));
        if (kind == FERRY_EVENT_MESSAGE && member == main_member) {
            uint32_t uid;
            ferry_receive_right *port = NULL;
            CHECK(ferry_message_take_service_port(m, &uid, &port));
            ferry_message_free(m);
            if (port == NULL || live == MAX_PORTS) {
                /* Not the name server's, or no room: dropped, and the
                 * user's right to it (if any) is a dead name. */
                ignored++;
                ferry_receive_right_free(port);
                continue;
            }
            CHECK(ferry_port_set_insert(set, port, &ports[live].member));
            ports[live++].uid = uid;
            continue;
        }
        size_t i = 0;
        while (i < live && ports[i].member != member)
            i++;
        if (i == live) {
            ferry_message_free(m);
            continue;
        }
        if (kind == FERRY_EVENT_MESSAGE) {
            bool has_reply = false;
            CHECK(ferry_message_has_reply(m, &has_reply));
            if (has_reply) {
                ferry_message *r;
                CHECK(ferry_message_new(1, &r));
                CHECK(ferry_message_set_body(r, (const uint8_t *)&ports[i].uid, sizeof ports[i].uid));
                if (ferry_message_reply(m, r, 0) == FERRY_OK)
                    calls++;
                ferry_message_free(r);
            }
            ferry_message_free(m);
        } else if (kind == FERRY_EVENT_NO_SENDERS) {
            ferry_receive_right *gone = NULL;
            CHECK(ferry_port_set_remove(set, member, &gone));
            ferry_receive_right_free(gone);
            printf("port of uid %u closed\n", ports[i].uid);
            ports[i] = ports[--live];
            closed++;
        }
    }
    printf("system service: ok, %lu ports closed, %lu calls answered, %lu messages on the main port ignored\n", closed, calls, ignored);
    ferry_port_set_free(set);
    ferry_bootstrap_free(names);
    return 0;
}
