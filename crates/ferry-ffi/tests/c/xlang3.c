/* The C side of the three-language test (python/tests/test_xlang.py starts
 * it next to a Python test and the Rust program `ferry-peer xlang3`; the
 * protocol is described in tests/src/bin/peer/xlang.rs).
 *
 * Looks NAME (the Rust program) up and sends it op 1, body "c": a send
 * right to a port of its own and a region by copy of BYTES bytes, word i
 * being word(i, C_SALT). Then receives two messages in either order:
 * - op 2 from Rust: a send right to the Python program and a region whose
 *   words must be word(i, RUST_SALT); answers by sending the Python
 *   program op 4, body "c", with a region by copy of word(i, C_SALT);
 * - op 4 from Python: a region whose words must be word(i, PY_SALT).
 * Prints "xlang3: ok" and exits 0 when both checked out.
 *
 * Run: ferry_xlang3 NAME BYTES */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define PY_SALT 0x1111111111111111ull
#define C_SALT 0x2222222222222222ull
#define RUST_SALT 0x3333333333333333ull

static uint64_t word(size_t i, uint64_t salt) { return ((uint64_t)i * 0x9E3779B97F4A7C15ull) ^ salt; }

/* A region of `len` bytes by copy, word i being word(i, salt). */
static ferry_region *filled(size_t len, uint64_t salt) {
    ferry_region *region;
    CHECK(ferry_region_new(len, &region));
    uint8_t *bytes;
    size_t got;
    CHECK(ferry_region_data(region, &bytes, &got));
    EXPECT(got == len);
    for (size_t i = 0; i < got / 8; i++) {
        uint64_t w = word(i, salt);
        memcpy(bytes + 8 * i, &w, 8);
    }
    return region;
}

/* Checks that item `index` of `m` is a by-value region of `len` bytes whose
 * words are word(i, salt). */
static void check_region(ferry_message *m, size_t index, size_t len, uint64_t salt) {
    size_t rlen;
    ferry_region_mode mode;
    CHECK(ferry_message_region_info(m, index, &rlen, &mode));
    EXPECT(mode == FERRY_REGION_COPY && rlen == len);
    ferry_mapped_region *mapped;
    CHECK(ferry_message_map_region(m, index, FERRY_MAP_READ_ONLY, &mapped));
    const uint8_t *view;
    size_t view_len;
    CHECK(ferry_mapped_region_data(mapped, &view, &view_len));
    EXPECT(view_len == len);
    size_t wrong = 0;
    for (size_t i = 0; i < view_len / 8; i++) {
        uint64_t w;
        memcpy(&w, view + 8 * i, 8);
        wrong += w != word(i, salt);
    }
    EXPECT(wrong == 0);
    ferry_mapped_region_free(mapped);
}

static void expect_body(ferry_message *m, const char *want) {
    const uint8_t *body;
    size_t len;
    CHECK(ferry_message_body(m, &body, &len));
    EXPECT(len == strlen(want) && memcmp(body, want, len) == 0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME BYTES\n", argv[0]);
        return 2;
    }
    size_t len = strtoul(argv[2], NULL, 10);
    EXPECT(len > 0 && len % 8 == 0);
    ferry_bootstrap *names;
    CHECK(ferry_bootstrap_connect(&names));
    ferry_send_right *to_rust = NULL;
    for (int i = 0; i < 6000 && ferry_bootstrap_lookup(names, argv[1], &to_rust) == FERRY_ERR_NAME_NOT_FOUND; i++) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    EXPECT(to_rust != NULL);

    ferry_receive_right *mine;
    ferry_send_right *to_me;
    CHECK(ferry_port_new(&mine, &to_me));

    /* To Rust: a send right to our port and a region by copy. */
    ferry_region *region = filled(len, C_SALT);
    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    CHECK(ferry_message_set_body(m, (const uint8_t *)"c", 1));
    CHECK(ferry_message_add_send_right(m, to_me));
    CHECK(ferry_message_add_region_copy(m, region));
    CHECK(ferry_send_right_send(to_rust, m, FERRY_TIMEOUT_INFINITE));
    ferry_message_free(m);
    ferry_region_free(region);

    int from_rust = 0, from_python = 0;
    while (!(from_rust && from_python)) {
        CHECK(ferry_receive_right_recv(mine, 30000, &m));
        uint32_t op;
        CHECK(ferry_message_op(m, &op));
        if (op == 2 && !from_rust) {
            /* From Rust: the Python program's send right and Rust's region. */
            expect_body(m, "r");
            size_t count;
            CHECK(ferry_message_item_count(m, &count));
            EXPECT(count == 2);
            ferry_item_kind kind;
            CHECK(ferry_message_item_kind(m, 0, &kind));
            EXPECT(kind == FERRY_ITEM_SEND_RIGHT);
            check_region(m, 1, len, RUST_SALT);
            ferry_send_right *to_python;
            CHECK(ferry_message_take_send_right(m, 0, &to_python));
            ferry_region *mine_for_python = filled(len, C_SALT);
            ferry_message *out;
            CHECK(ferry_message_new(4, &out));
            CHECK(ferry_message_set_body(out, (const uint8_t *)"c", 1));
            CHECK(ferry_message_add_region_copy(out, mine_for_python));
            CHECK(ferry_send_right_send(to_python, out, FERRY_TIMEOUT_INFINITE));
            ferry_message_free(out);
            ferry_region_free(mine_for_python);
            ferry_send_right_free(to_python);
            from_rust = 1;
        } else if (op == 4 && !from_python) {
            /* From Python, through the right Rust passed it: its region. */
            expect_body(m, "p");
            check_region(m, 0, len, PY_SALT);
            from_python = 1;
        } else {
            fprintf(stderr, "xlang3: unexpected op %u\n", op);
            return 1;
        }
        ferry_message_free(m);
    }
    printf("xlang3: ok\n");
    ferry_send_right_free(to_rust);
    ferry_receive_right_free(mine);
    ferry_bootstrap_free(names);
    return 0;
}
