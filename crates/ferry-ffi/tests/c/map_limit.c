/* Mapping a received region immediately allocates every page of it, and
 * its length is the sender's claim: FERRY_MAP_IMMEDIATE refuses a region
 * longer than FERRY_MAP_IMMEDIATE_LIMIT with FERRY_ERR_TOO_LARGE (the
 * region stays in the message), ferry_message_map_region_limited sets the
 * limit, and a lazy mapping has none unless given one.
 *
 * Run: ferry_map_limit */
#include <stdint.h>
#include <string.h>

#include "check.h"

/* A message carrying a sparse region of `len` bytes by copy, received. */
static ferry_message *receive_region(ferry_receive_right *rx, ferry_send_right *tx, size_t len) {
    ferry_region *r;
    CHECK(ferry_region_new(len, &r));
    ferry_message *m;
    CHECK(ferry_message_new(1, &m));
    CHECK(ferry_message_add_region_copy(m, r));
    ferry_region_free(r);
    CHECK(ferry_send_right_send(tx, m, 0));
    ferry_message_free(m);
    CHECK(ferry_receive_right_recv(rx, 10000, &m));
    return m;
}

int main(void) {
    ferry_receive_right *rx;
    ferry_send_right *tx;
    CHECK(ferry_port_new(&rx, &tx));
    const size_t over = (size_t)FERRY_MAP_IMMEDIATE_LIMIT + 4096;

    /* Immediately: refused before a page is allocated; the region stays. */
    ferry_message *m = receive_region(rx, tx, over);
    ferry_mapped_region *map = NULL;
    EXPECT(ferry_message_map_region(m, 0, FERRY_MAP_IMMEDIATE | FERRY_MAP_READ_ONLY, &map) == FERRY_ERR_TOO_LARGE && map == NULL);
    EXPECT(strstr(ferry_last_error_message(), "exceeds") != NULL);
    size_t len = 0;
    CHECK(ferry_message_region_info(m, 0, &len, NULL));
    EXPECT(len == over);
    /* A smaller limit of the caller's own refuses it too; so does a lazy
     * mapping given one. */
    EXPECT(ferry_message_map_region_limited(m, 0, FERRY_MAP_IMMEDIATE, 1 << 20, &map) == FERRY_ERR_TOO_LARGE && map == NULL);
    EXPECT(ferry_message_map_region_limited(m, 0, 0, 1 << 20, &map) == FERRY_ERR_TOO_LARGE && map == NULL);
    /* Lazily with no limit: only address space; still mapped. */
    CHECK(ferry_message_map_region(m, 0, FERRY_MAP_READ_ONLY, &map));
    CHECK(ferry_mapped_region_info(map, &len, NULL));
    EXPECT(len == over);
    ferry_mapped_region_free(map);
    ferry_message_free(m);

    /* Within the limit the caller gives: mapped immediately. */
    m = receive_region(rx, tx, 1 << 20);
    EXPECT(ferry_message_map_region_limited(m, 0, FERRY_MAP_IMMEDIATE, (1 << 20) - 1, &map) == FERRY_ERR_TOO_LARGE);
    CHECK(ferry_message_map_region_limited(m, 0, FERRY_MAP_IMMEDIATE | FERRY_MAP_READ_ONLY, 1 << 20, &map));
    const uint8_t *data;
    CHECK(ferry_mapped_region_data(map, &data, &len));
    EXPECT(len == 1 << 20 && data[0] == 0 && data[len - 1] == 0);
    ferry_mapped_region_free(map);
    ferry_message_free(m);

    /* Up to the default limit, FERRY_MAP_IMMEDIATE maps as before. */
    m = receive_region(rx, tx, 4096);
    CHECK(ferry_message_map_region(m, 0, FERRY_MAP_IMMEDIATE, &map));
    ferry_mapped_region_free(map);
    ferry_message_free(m);

    ferry_send_right_free(tx);
    ferry_receive_right_free(rx);
    printf("map_limit: ok\n");
    return 0;
}
