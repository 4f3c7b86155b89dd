/* The C side of the cross-language test: a C program and a Rust program
 * exchange send rights and by-value regions.
 *
 * Looks NAME up (a Rust program's port), sends it a send right to a port of
 * its own and a region by copy with its checksum; receives from Rust a
 * region by move (checked word by word) and a shared region (which must
 * not be viewable as immutable, only read by copying), and answers through
 * the send-once right that came with them.
 *
 * Run: ferry_xlang NAME MIB */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

static uint64_t word(size_t i, uint64_t salt) { return ((uint64_t)i * 0x9E3779B97F4A7C15ull) ^ salt; }

static uint64_t checksum(const uint64_t *w, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = (h << 7 | h >> 57) ^ w[i];
    return h;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME MIB\n", argv[0]);
        return 2;
    }
    size_t len = strtoul(argv[2], NULL, 10) << 20;
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_send_right *to_rust = NULL;
    for (int i = 0; i < 2000 && ferry_bootstrap_lookup(names, argv[1], &to_rust) == FERRY_ERR_NAME_NOT_FOUND; i++) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    EXPECT(to_rust != NULL);

    ferry_receive_right *mine;
    ferry_send_right *to_me;
    CHECK(ferry_port_new(&mine, &to_me));

    /* To Rust: a send right to our port and a region by copy. */
    ferry_region *region;
    CHECK(ferry_region_new(len, &region));
    uint8_t *bytes;
    size_t got;
    CHECK(ferry_region_data(region, &bytes, &got));
    uint64_t *w = (uint64_t *)bytes;
    for (size_t i = 0; i < got / 8; i++)
        w[i] = word(i, 0);
    uint64_t sum = checksum(w, got / 8);
    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    CHECK(ferry_message_set_body(m, (const uint8_t *)&sum, sizeof sum));
    CHECK(ferry_message_add_send_right(m, to_me));
    CHECK(ferry_message_add_region_copy(m, region));
    CHECK(ferry_send_right_send(to_rust, m, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(m);
    /* What we write now, Rust never sees. */
    CHECK(ferry_region_data(region, &bytes, &got));
    memset(bytes, 0, got);

    /* From Rust: a region by move, a shared region, a send-once reply right. */
    CHECK(ferry_receive_right_recv(mine, 30000, &m));
    uint32_t op;
    CHECK(ferry_message_op(m, &op));
    EXPECT(op == 2);
    ferry_credentials who;
    CHECK(ferry_message_sender(m, &who));
    const uint8_t *body;
    size_t body_len;
    uint64_t rust_sum;
    CHECK(ferry_message_body(m, &body, &body_len));
    EXPECT(body_len == sizeof rust_sum);
    memcpy(&rust_sum, body, sizeof rust_sum);

    size_t count;
    CHECK(ferry_message_item_count(m, &count));
    EXPECT(count == 2);
    ferry_region_mode mode;
    size_t rlen;
    CHECK(ferry_message_region_info(m, 0, &rlen, &mode));
    EXPECT(mode == FERRY_REGION_MOVE);
    ferry_mapped_region *moved;
    CHECK(ferry_message_map_region(m, 0, FERRY_MAP_READ_ONLY, &moved));
    const uint8_t *view;
    size_t view_len;
    CHECK(ferry_mapped_region_data(moved, &view, &view_len));
    EXPECT(view_len == rlen);
    const uint64_t *rw = (const uint64_t *)view;
    size_t wrong = 0;
    for (size_t i = 0; i < view_len / 8; i++)
        wrong += rw[i] != word(i, 0x5555555555555555ull);
    uint64_t seen = checksum(rw, view_len / 8);
    EXPECT(wrong == 0 && seen == rust_sum);
    /* Read-only: no writable view. */
    uint8_t *no;
    EXPECT(ferry_mapped_region_data_mut(moved, &no, &view_len) == FERRY_ERR_INVALID_ARGUMENT);

    /* The shared region: refused unless asked for, then readable only by copy. */
    CHECK(ferry_message_region_info(m, 1, &rlen, &mode));
    EXPECT(mode == FERRY_REGION_SHARE);
    ferry_mapped_region *shared = NULL;
    EXPECT(ferry_message_map_region(m, 1, 0, &shared) == FERRY_ERR_SENDER_MAY_WRITE && shared == NULL);
    CHECK(ferry_message_map_region(m, 1, FERRY_MAP_ALLOW_SENDER_WRITES, &shared));
    EXPECT(ferry_mapped_region_data(shared, &view, &view_len) == FERRY_ERR_SENDER_MAY_WRITE);
    char hello[6] = {0};
    CHECK(ferry_mapped_region_read(shared, 0, (uint8_t *)hello, 5));
    EXPECT(strcmp(hello, "share") == 0);
    EXPECT(ferry_mapped_region_read(shared, rlen - 2, (uint8_t *)hello, 5) == FERRY_ERR_INVALID_ARGUMENT);

    bool has_reply;
    CHECK(ferry_message_has_reply(m, &has_reply));
    EXPECT(has_reply);
    ferry_message *answer;
    CHECK(ferry_message_new(3, &answer));
    CHECK(ferry_message_set_body(answer, (const uint8_t *)&seen, sizeof seen));
    CHECK(ferry_message_reply(m, answer, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(answer);

    printf("xlang: ok, from pid %d: %zu bytes by move and a shared region\n", (int)who.pid, (size_t)view_len);
    ferry_mapped_region_free(shared);
    ferry_mapped_region_free(moved);
    ferry_message_free(m);
    ferry_region_free(region);
    ferry_send_right_free(to_rust);
    ferry_receive_right_free(mine);
    ferry_bootstrap_free(names);
    return 0;
}
