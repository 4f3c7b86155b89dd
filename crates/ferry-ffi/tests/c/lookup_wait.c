/* Two programs finding each other when either may start first: a client
 * (a forked child here) waits for a name with ferry_bootstrap_lookup_wait
 * while the server registers it later; a name that never comes is
 * FERRY_ERR_NAME_NOT_FOUND once the timeout has passed, and a zero
 * timeout looks once. Descriptors are counted around a loop of waits.
 *
 * Run: ferry_lookup_wait NAME   (FERRY_BOOTSTRAP pointing at a name server) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fds.h"

static int client(const char *name) {
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_send_right *server = NULL;
    CHECK(ferry_bootstrap_lookup_wait(names, name, 30000, &server)); /* registered later */
    ferry_message *m;
    CHECK(ferry_message_new(7, &m));
    CHECK(ferry_send_right_send(server, m, 10000));
    ferry_message_free(m);
    ferry_send_right_free(server);
    ferry_bootstrap_free(names);
    return 0;
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    const char *name = argv[1];
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0)
        _exit(client(name));

    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL); /* most likely the child is waiting by now */
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    CHECK(ferry_bootstrap_register(names, name, tx));
    ferry_message *m;
    CHECK(ferry_receive_right_recv(rx, 30000, &m));
    uint32_t op;
    CHECK(ferry_message_op(m, &op));
    EXPECT(op == 7);
    ferry_message_free(m);
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* Found at once when it is there, with any timeout. */
    ferry_send_right *found = NULL;
    CHECK(ferry_bootstrap_lookup_wait(names, name, 0, &found));
    ferry_send_right_free(found);

    /* A name that never comes. */
    int before = open_fds();
    for (int i = 0; i < 20; i++) {
        found = NULL;
        ferry_status st = ferry_bootstrap_lookup_wait(names, "never-registered", i % 2 ? 0 : 20, &found);
        EXPECT(st == FERRY_ERR_NAME_NOT_FOUND && found == NULL);
    }
    EXPECT(open_fds() == before);
    EXPECT(ferry_bootstrap_lookup_wait(names, "", 10, &found) == FERRY_ERR_NAME_INVALID);
    EXPECT(ferry_bootstrap_lookup_wait(names, name, 10, NULL) == FERRY_ERR_NULL);

    CHECK(ferry_bootstrap_unregister(names, name));
    ferry_bootstrap_free(names);
    ferry_send_right_free(tx);
    ferry_receive_right_free(rx);
    printf("lookup wait: ok\n");
    return 0;
}
