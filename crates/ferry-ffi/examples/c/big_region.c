/* A big region by value between two processes, from C.
 *
 * The parent fills a region, sends it by copy (sealed: nothing is copied,
 * pages are shared copy-on-write), then keeps writing its own copy. The
 * child maps the region, checks every word against the checksum that came
 * in the message body, writes its own private copy, and answers with what
 * it saw. Neither sees the other's writes.
 *
 * Run: ferry_big_region [MIB]   (default 256) */
#define _POSIX_C_SOURCE 200809L
#include <spawn.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

extern char **environ;

enum { OP_HELLO = 1, OP_REGION = 2, OP_SAW = 3 };

static uint64_t word(size_t i) { return (uint64_t)i * 0x9E3779B97F4A7C15ull; }

static uint64_t checksum(const uint64_t *w, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = (h << 7 | h >> 57) ^ w[i];
    return h;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void send_u64(const ferry_send_right *to, uint32_t op, const uint64_t *v, size_t n, ferry_region *region) {
    ferry_message *m;
    CHECK(ferry_message_new(op, &m));
    CHECK(ferry_message_set_body(m, (const uint8_t *)v, n * sizeof *v));
    if (region)
        CHECK(ferry_message_add_region_copy(m, region));
    CHECK(ferry_send_right_send(to, m, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(m);
}

static int child(const char *name) {
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_send_right *to_parent;
    CHECK(ferry_bootstrap_lookup_wait(names, name, 10000, &to_parent));
    ferry_receive_right *mine;
    ferry_send_right *to_me;
    CHECK(ferry_port_new(&mine, &to_me));
    ferry_message *hello;
    CHECK(ferry_message_new(OP_HELLO, &hello));
    CHECK(ferry_message_add_send_right(hello, to_me));
    CHECK(ferry_send_right_send(to_parent, hello, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(hello);

    ferry_message *m;
    CHECK(ferry_receive_right_recv(mine, FERRY_TIMEOUT_INFINITE, &m));
    const uint8_t *body;
    size_t body_len, len;
    uint64_t expect;
    CHECK(ferry_message_body(m, &body, &body_len));
    EXPECT(body_len == sizeof expect);
    memcpy(&expect, body, sizeof expect);
    ferry_region_mode mode;
    CHECK(ferry_message_region_info(m, 0, &len, &mode));
    EXPECT(mode == FERRY_REGION_COPY);
    ferry_mapped_region *map;
    CHECK(ferry_message_map_region(m, 0, 0, &map));
    const uint8_t *view;
    size_t view_len;
    CHECK(ferry_mapped_region_data(map, &view, &view_len));
    EXPECT(view_len == len);
    const uint64_t *w = (const uint64_t *)view;
    size_t n = len / sizeof *w;
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += w[i] != word(i);
    uint64_t saw[3] = {checksum(w, n), wrong, 0};
    EXPECT(saw[0] == expect);
    /* Our writes stay ours: the mapping is private. */
    uint8_t *mine_view;
    CHECK(ferry_mapped_region_data_mut(map, &mine_view, &view_len));
    memset(mine_view, 0xAB, 4096);
    saw[2] = ((uint64_t *)mine_view)[0];
    send_u64(to_parent, OP_SAW, saw, 3, NULL);
    ferry_mapped_region_free(map);
    ferry_message_free(m);
    ferry_send_right_free(to_parent);
    ferry_receive_right_free(mine);
    ferry_bootstrap_free(names);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(argv[2]);
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    EXPECT(mib > 0);
    size_t len = mib << 20;

    ferry_receive_right *replies;
    ferry_send_right *reply_to;
    CHECK(ferry_port_new(&replies, &reply_to));
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names)); /* starts an embedded name server if none runs */
    char name[64];
    snprintf(name, sizeof name, "big-region-c-%d", (int)getpid());
    CHECK(ferry_bootstrap_register(names, name, reply_to));

    setenv("FERRY_NO_EMBED", "1", 1);
    char *child_argv[] = {argv[0], "child", name, NULL};
    pid_t pid;
    EXPECT(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, child_argv, environ) == 0);

    ferry_message *hello;
    CHECK(ferry_receive_right_recv(replies, FERRY_TIMEOUT_INFINITE, &hello));
    ferry_send_right *to_child;
    CHECK(ferry_message_take_send_right(hello, 0, &to_child));
    ferry_message_free(hello);

    double t0 = now();
    ferry_region *region;
    CHECK(ferry_region_new(len, &region));
    uint8_t *bytes;
    size_t got;
    CHECK(ferry_region_data(region, &bytes, &got));
    EXPECT(got == len);
    uint64_t *w = (uint64_t *)bytes;
    size_t n = len / sizeof *w;
    for (size_t i = 0; i < n; i++)
        w[i] = word(i);
    uint64_t sum = checksum(w, n);
    double t1 = now();
    send_u64(to_child, OP_REGION, &sum, 1, region);
    double t2 = now();
    /* Keep writing our copy: the child never sees it. */
    CHECK(ferry_region_data(region, &bytes, &got));
    memset(bytes, 0xFF, 4096);

    ferry_message *saw;
    CHECK(ferry_receive_right_recv(replies, FERRY_TIMEOUT_INFINITE, &saw));
    const uint8_t *body;
    size_t body_len;
    CHECK(ferry_message_body(saw, &body, &body_len));
    uint64_t r[3];
    EXPECT(body_len == sizeof r);
    memcpy(r, body, sizeof r);
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(r[0] == sum && r[1] == 0);
    EXPECT(r[2] == 0xABABABABABABABABull);
    EXPECT(((uint64_t *)bytes)[0] == UINT64_MAX);

    printf("parent: filled %zu MiB in %.1f ms, sent by copy in %.3f ms\n", mib, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    printf("child: checksum %016llx matches, 0 words wrong; its writes stayed its own\n", (unsigned long long)r[0]);
    ferry_message_free(saw);
    ferry_region_free(region);
    ferry_send_right_free(to_child);
    CHECK(ferry_bootstrap_unregister(names, name));
    ferry_bootstrap_free(names);
    ferry_send_right_free(reply_to);
    ferry_receive_right_free(replies);
    return 0;
}
