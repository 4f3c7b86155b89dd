/* The wire-format test vectors (tests/vectors/) through the C API's parser.
 *
 * Reads the manifest (vectors.txt: NAME FDS EXPECT per line) and each
 * NAME.hex, parses the bytes with ferry_wire_parse, renders the outcome in
 * the manifest's spelling and compares it with the expectation exactly.
 * Prints every mismatch and exits 1 if there was one.
 *
 * Run: ferry_vectors DIR [MANIFEST]   (MANIFEST defaults to DIR/vectors.txt) */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

#define MAX_BYTES (1 << 20)

/* Reads hex bytes: whitespace ignored, '#' starts a comment. -1 on a bad
 * digit or an odd count. */
static long read_hex(const char *path, uint8_t *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long n = 0;
    int c, hi = -1, comment = 0;
    while ((c = fgetc(f)) != EOF) {
        if (comment) {
            comment = c != '\n';
            continue;
        }
        if (c == '#') {
            comment = 1;
            continue;
        }
        if (isspace(c))
            continue;
        int v = isdigit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (v < 0 || (size_t)n >= cap) {
            fclose(f);
            return -1;
        }
        if (hi < 0) {
            hi = v;
        } else {
            out[n++] = (uint8_t)(hi << 4 | v);
            hi = -1;
        }
    }
    fclose(f);
    return hi < 0 ? n : -1;
}

/* Appends to a bounded string. */
static void add(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t cap, const char *fmt, ...) {
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
}

/* The reason as a quoted, escaped string (as Rust's {:?} writes it). */
static void add_quoted(char *buf, size_t cap, const char *s) {
    add(buf, cap, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            add(buf, cap, "\\%c", *s);
        else if (*s == '\n')
            add(buf, cap, "\\n");
        else
            add(buf, cap, "%c", *s);
    }
    add(buf, cap, "\"");
}

static void render(const uint8_t *bytes, size_t len, size_t fds, char *out, size_t cap) {
    ferry_wire_parsed p;
    ferry_wire_error e;
    out[0] = 0;
    ferry_status st = ferry_wire_parse(bytes, len, fds, &p, &e);
    if (st == FERRY_OK) {
        if (e.kind != FERRY_WIRE_OK || p.inline_offset + p.inline_len != len) {
            add(out, cap, "inconsistent success");
            return;
        }
        add(out, cap, "ok op=%" PRIu32 " flags=0x%02x items=", p.op, p.flags);
        if (p.item_count == 0)
            add(out, cap, "-");
        for (size_t i = 0; i < p.item_count;) {
            size_t j = i + 1;
            while (j < p.item_count && p.items[j].kind == p.items[i].kind && p.items[j].fds == p.items[i].fds)
                j++;
            add(out, cap, "%s%u:%u", i ? "," : "", p.items[i].kind, p.items[i].fds);
            if (j - i > 1)
                add(out, cap, "*%zu", j - i);
            i = j;
        }
        add(out, cap, " inline=%zu", p.inline_len);
        return;
    }
    if (st != FERRY_ERR_BAD_MESSAGE || ferry_last_error_message()[0] == 0) {
        add(out, cap, "status %s", ferry_status_name(st));
        return;
    }
    const char *name = ferry_wire_error_name(e.kind);
    unsigned long long a = e.a, b = e.b;
    switch (e.kind) {
    case FERRY_WIRE_TRUNCATED: add(out, cap, "%s{need=%llu,got=%llu}", name, a, b); break;
    case FERRY_WIRE_BAD_MAGIC: add(out, cap, "%s(0x%08llx)", name, a); break;
    case FERRY_WIRE_LENGTH_MISMATCH: add(out, cap, "%s{declared=%llu,actual=%llu}", name, a, b); break;
    case FERRY_WIRE_FD_COUNT_MISMATCH: add(out, cap, "%s{declared=%llu,received=%llu}", name, a, b); break;
    case FERRY_WIRE_BAD_ITEM_FD_COUNT: add(out, cap, "%s{item=%llu,count=%llu}", name, a, b); break;
    case FERRY_WIRE_UNKNOWN_VERSION:
    case FERRY_WIRE_NEEDLESS_VERSION:
    case FERRY_WIRE_TOO_MANY_ITEMS:
    case FERRY_WIRE_INLINE_TOO_LARGE:
    case FERRY_WIRE_TOO_MANY_FDS:
    case FERRY_WIRE_UNKNOWN_ITEM_KIND: add(out, cap, "%s(%llu)", name, a); break;
    case FERRY_WIRE_BAD_REGION:
    case FERRY_WIRE_BAD_PAGER_ITEM:
        add(out, cap, "%s{item=%llu,reason=", name, a);
        add_quoted(out, cap, e.reason);
        add(out, cap, "}");
        break;
    default: add(out, cap, "%s", name); break;
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s DIR [MANIFEST]\n", argv[0]);
        return 2;
    }
    char path[4096];
    if (argc == 3)
        snprintf(path, sizeof path, "%s", argv[2]);
    else
        snprintf(path, sizeof path, "%s/vectors.txt", argv[1]);
    FILE *manifest = fopen(path, "r");
    if (!manifest) {
        perror(path);
        return 2;
    }
    static uint8_t bytes[MAX_BYTES];
    char line[4096], got[4096];
    int total = 0, failed = 0, lineno = 0;
    while (fgets(line, sizeof line, manifest)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *save, *name = strtok_r(line, " \t\r\n", &save), *fds_s = strtok_r(NULL, " \t\r\n", &save);
        if (!name)
            continue;
        char expect[4096] = "";
        for (char *t; (t = strtok_r(NULL, " \t\r\n", &save));)
            add(expect, sizeof expect, "%s%s", expect[0] ? " " : "", t);
        if (!fds_s || !expect[0]) {
            fprintf(stderr, "manifest line %d: expected NAME FDS EXPECT\n", lineno);
            return 2;
        }
        snprintf(path, sizeof path, "%s/%s.hex", argv[1], name);
        long n = read_hex(path, bytes, sizeof bytes);
        if (n < 0) {
            fprintf(stderr, "%s: unreadable or bad hex\n", path);
            return 2;
        }
        render(bytes, (size_t)n, strtoul(fds_s, NULL, 10), got, sizeof got);
        total++;
        if (strcmp(got, expect) != 0) {
            failed++;
            printf("FAIL %s: expected %s, got %s\n", name, expect, got);
        }
    }
    fclose(manifest);
    printf("%d vectors, %d failed\n", total, failed);
    return failed || total < 50 ? 1 : 0;
}
