#!/usr/bin/env python3
"""Generates ferry's wire-format test vectors (see docs/wire-format.md).

The committed files are the source of truth; this script documents how they
were made and can regenerate them byte for byte:

    python3 tests/vectors/gen.py            # rewrite the vectors
    python3 tests/vectors/gen.py --check    # fail if a file would change
    python3 tests/vectors/gen.py --corpus DIR   # seed a fuzzing corpus

A corpus file is one byte (the descriptor count) followed by the datagram,
the input format of the `parse` fuzz target in fuzz/.

Each vector is NAME.hex: hexadecimal bytes, whitespace ignored, `#` starts a
comment that runs to the end of the line. vectors.txt lists one vector per
line as `NAME FDS EXPECT`: the number of descriptors that arrived with the
datagram, and the outcome the parser must produce (see vectors.txt's header).
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MAGIC = b"FERY"
VERSION = 1
VERSION_EMPTY_REGIONS = 2   # version 1 plus regions of length 0; only for messages that carry one
FLAG_REPLY = 0x01
SEND, SEND_ONCE, RECEIVE, REGION, PAGER = 1, 2, 3, 4, 16
KIND_NAMES = {SEND: "send", SEND_ONCE: "send-once", RECEIVE: "receive", REGION: "region", PAGER: "pager"}
COPY, MOVE, LEND, SHARE = 1, 2, 3, 4            # region transfer modes
REGION_FLAG_HUGE, REGION_FLAG_AUTO = 0x1, 0x2   # every region flag version 1 knows
PAGER_USERFAULT, PAGER_CACHE = 1, 2             # pager item modes (checked after parse)
ISIZE_MAX = (1 << 63) - 1
MAX_ITEMS = 64
MAX_INLINE = 64 * 1024
MAX_FDS = 253


class Item:
    def __init__(self, kind, fds=1, mode=0, flags=0, length=0, addr=0, aux=0):
        self.kind, self.fds, self.mode, self.flags = kind, fds, mode, flags
        self.length, self.addr, self.aux = length, addr, aux

    def encode(self):
        return struct.pack("<BBHIQQQ", self.kind, self.mode, self.fds, self.flags,
                           self.length, self.addr, self.aux)


def message(op=0, flags=0, items=(), inline=b"", version=VERSION, magic=MAGIC,
            count=None, inline_len=None, nfds=None, res18=0, res20=0):
    """Encodes a message; the keyword overrides make the header lie."""
    count = len(items) if count is None else count
    inline_len = len(inline) if inline_len is None else inline_len
    nfds = sum(i.fds for i in items) if nfds is None else nfds
    header = magic + struct.pack("<BBHIIHHI", version, flags, count, op, inline_len,
                                 nfds, res18, res20)
    assert len(header) == 24
    return header + b"".join(i.encode() for i in items) + inline


def hexdump(b, width=32):
    return [" ".join(f"{x:02x}" for x in b[i:i + width]) for i in range(0, len(b), width)]


def annotate(data):
    """Renders bytes as hex with a comment per field, as far as they parse."""
    out = []
    if len(data) < 24:
        out.append("# header (short)")
        out.extend(hexdump(data) or ["# (no bytes)"])
        return out
    version, flags, count, op, inline_len, nfds, res18, res20 = struct.unpack_from("<BBHIIHHI", data, 4)
    magic = data[0:4]
    out.append("# header")
    out.append(f"{magic.hex(' ')}    # magic {magic!r}")
    out.append(f"{version:02x}             # version {version}")
    out.append(f"{flags:02x}             # flags {flags:#04x}")
    out.append(f"{data[6:8].hex(' ')}          # item count {count}")
    out.append(f"{data[8:12].hex(' ')}    # op {op}")
    out.append(f"{data[12:16].hex(' ')}    # inline length {inline_len}")
    out.append(f"{data[16:18].hex(' ')}          # descriptor count {nfds}")
    out.append(f"{data[18:20].hex(' ')}          # reserved")
    out.append(f"{data[20:24].hex(' ')}    # reserved")
    at = 24
    shown = min(count, MAX_ITEMS)
    for n in range(shown):
        if at + 32 > len(data):
            break
        kind, mode, fds, iflags, length, addr, aux = struct.unpack_from("<BBHIQQQ", data, at)
        name = KIND_NAMES.get(kind, "unknown")
        out.append(f"# item {n}: kind {kind} ({name}), mode {mode}, {fds} fds, flags {iflags:#x}, "
                   f"len {length}, addr {addr:#x}, aux {aux:#x}")
        out.append(data[at:at + 32].hex(" "))
        at += 32
    if at < len(data):
        out.append(f"# {len(data) - at} further bytes (inline data)")
        out.extend(hexdump(data[at:]))
    return out


VECTORS = []  # (name, bytes, fds, expect, description)


def vec(name, data, fds, expect, why):
    VECTORS.append((name, data, fds, expect, why))


def kinds(items):
    """Items as KIND:FDS, a run of N equal ones as KIND:FDS*N; `-` for none."""
    runs = []
    for i in items:
        if runs and runs[-1][0] == (i.kind, i.fds):
            runs[-1][1] += 1
        else:
            runs.append([(i.kind, i.fds), 1])
    return ",".join(f"{k}:{f}" + (f"*{n}" if n > 1 else "") for (k, f), n in runs) or "-"


def ok(name, why, op=0, flags=0, items=(), inline=b"", version=VERSION):
    items = list(items)
    data = message(op=op, flags=flags, items=items, inline=inline, version=version)
    expect = f"ok op={op} flags={flags:#04x} items={kinds(items)} inline={len(inline)}"
    vec(name, data, sum(i.fds for i in items), expect, why)


def region(mode=COPY, fds=None, length=4096, **kw):
    """A region item that is valid unless a keyword says otherwise."""
    fds = (2 if mode == LEND else 1) if fds is None else fds
    return Item(REGION, fds=fds, mode=mode, length=length, **kw)


def pager(mode=PAGER_USERFAULT, fds=1, length=8192, addr=0x7f12_3456_0000, **kw):
    """A pager item (a userfaultfd and the range it registered)."""
    return Item(PAGER, fds=fds, mode=mode, length=length, addr=addr, **kw)


def bad_region(item, reason):
    assert not any(c in reason for c in '"\\#'), reason
    return f'BadRegion{{item={item},reason="{reason}"}}'


def build():
    send, once = Item(SEND), Item(SEND_ONCE)

    # ---- valid messages ----
    ok("ok_empty", "smallest valid message: header only", op=0)
    ok("ok_inline", "inline bytes only", op=7, inline=b"hello, ferry")
    ok("ok_op_max", "largest operation id", op=0xFFFFFFFF, inline=b"\x00")
    ok("ok_send", "one send right", op=1, items=[send])
    ok("ok_send_once", "one send-once right", op=2, items=[once])
    ok("ok_receive", "a receive right with no send-once rights outstanding", op=3, items=[Item(RECEIVE, fds=1)])
    ok("ok_receive_with_once", "a receive right with two send-once rights outstanding (3 fds)",
       op=3, items=[Item(RECEIVE, fds=3)])
    ok("ok_reply_send", "reply flag, item 0 a send right", op=10, flags=FLAG_REPLY, items=[send], inline=b"ping")
    ok("ok_reply_send_once", "reply flag, item 0 a send-once right, more items after it",
       op=11, flags=FLAG_REPLY, items=[once, send, Item(RECEIVE, fds=2)], inline=b"request")
    ok("ok_region", "an out-of-line region item: copy, one page, no address",
       op=12, items=[region(COPY)])
    ok("ok_region_empty", "an empty region (length 0): version 2",
       op=12, items=[region(MOVE, length=0)], version=VERSION_EMPTY_REGIONS)
    ok("ok_region_empty_lend", "an empty lent frame after a send right and a full region: version 2",
       op=12, items=[send, region(COPY), region(LEND, length=0, aux=5)], version=VERSION_EMPTY_REGIONS)
    ok("ok_region_modes", "a region in each mode: copy, move, share with one fd; lend with two and a slot",
       op=12, items=[region(COPY, length=1), region(MOVE, length=8192, addr=0x7f00_0000_0000),
                     region(SHARE, length=4097, addr=0x1000), region(LEND, length=65536, aux=3)])
    ok("ok_region_flags", "a region with every known flag (huge pages, automatic placement)",
       op=12, items=[region(MOVE, flags=REGION_FLAG_HUGE | REGION_FLAG_AUTO)])
    ok("ok_region_lend_slot_max", "a lent region whose pool slot is the largest u64",
       op=12, items=[region(LEND, aux=0xFFFF_FFFF_FFFF_FFFF)])
    ok("ok_region_len_max", "the longest region: isize::MAX bytes, no address",
       op=12, items=[region(COPY, length=ISIZE_MAX)])
    ok("ok_region_addr_top", "a region ending at the last byte of the address space (addr + len = 2^64 - 1)",
       op=12, items=[region(COPY, length=0xFFF, addr=0xFFFF_FFFF_FFFF_F000)])
    ok("ok_pager", "a pager item: a userfaultfd and the range it registered",
       op=18, items=[pager()])
    ok("ok_pager_cache", "a pager item: a page cache of an 8 KiB object",
       op=18, items=[pager(PAGER_CACHE, addr=0)])
    ok("ok_pager_unchecked_fields", "parse leaves a pager item's mode, len and addr to the descriptor checks",
       op=18, items=[pager(mode=0xFF, length=1, addr=0x123)])
    ok("ok_all_kinds", "every kind once, in kind order", op=13,
       items=[send, once, Item(RECEIVE, fds=2), region(COPY, length=8192), pager()], inline=b"\x01\x02\x03")
    ok("ok_max_items", "MAX_ITEMS (64) send rights", op=14, items=[send] * MAX_ITEMS)
    ok("ok_max_fds", "MAX_FDS (253) descriptors: one receive right with 252 send-once rights",
       op=15, items=[Item(RECEIVE, fds=MAX_FDS)])
    ok("ok_max_inline", "MAX_INLINE (65536) inline bytes", op=16,
       inline=bytes((i * 7 + 3) & 0xFF for i in range(MAX_INLINE)))
    ok("ok_max_message", "MAX_MESSAGE (67608) bytes: 64 items and 65536 inline bytes", op=17, flags=FLAG_REPLY,
       items=[once] + [Item(RECEIVE, fds=3)] * 63, inline=bytes(i & 0xFF for i in range(MAX_INLINE)))

    # ---- truncated headers ----
    good = message(op=1, items=[send], inline=b"abc")
    vec("trunc_empty", b"", 0, "Truncated{need=24,got=0}", "zero-length datagram")
    vec("trunc_header_1", good[:1], 0, "Truncated{need=24,got=1}", "one byte")
    vec("trunc_header_10", good[:10], 0, "Truncated{need=24,got=10}", "ten bytes of a header")
    vec("trunc_header_23", good[:23], 1, "Truncated{need=24,got=23}", "one byte short of a header")
    vec("trunc_before_magic", b"\x12\x34\x56\x78" + bytes(19), 0, "Truncated{need=24,got=23}",
        "order: length is checked before the magic")

    # ---- magic and version ----
    vec("bad_magic", struct.pack("<I", 0x12345678) + message()[4:], 0, "BadMagic(0x12345678)", "wrong magic")
    vec("bad_magic_swapped", b"YREF" + message()[4:], 0, "BadMagic(0x46455259)", "magic in big-endian order")
    vec("bad_magic_zero", bytes(24), 0, "BadMagic(0x00000000)", "all zeros")
    vec("bad_magic_before_version", message(magic=b"FERX", version=9), 0, "BadMagic(0x58524546)",
        "order: magic before version")
    vec("version_0", message(version=0), 0, "UnknownVersion(0)", "version 0 is not a version")
    vec("version_2_needless", message(version=VERSION_EMPTY_REGIONS, op=1, inline=b"x"), 0, "NeedlessVersion(2)",
        "version 2 for a message version 1 expresses (no empty region)")
    vec("version_2_needless_after_items", message(version=VERSION_EMPTY_REGIONS, items=[region(COPY, fds=2)]), 2,
        "BadItemFdCount{item=0,count=2}", "order: every item rule before the version's need")
    vec("version_2_needless_after_reply", message(version=VERSION_EMPTY_REGIONS, flags=FLAG_REPLY, items=[region(COPY)]),
        1, "BadReplyRight", "order: the reply rule before the version's need")
    vec("version_3", message(version=3, op=1, inline=b"x"), 0, "UnknownVersion(3)", "a future version")
    vec("version_255", message(version=255), 0, "UnknownVersion(255)", "largest version byte")
    vec("version_before_reserved", message(version=3, flags=0x80, res20=1), 0, "UnknownVersion(3)",
        "order: version before reserved fields, which a later version may use")

    # ---- reserved header fields ----
    vec("reserved_flag_02", message(flags=0x02), 0, "ReservedNotZero", "undefined flag bit 1")
    vec("reserved_flag_80", message(flags=0x80 | FLAG_REPLY, items=[send]), 1, "ReservedNotZero",
        "undefined flag bit 7 beside the reply flag")
    vec("reserved_18", message(res18=1), 0, "ReservedNotZero", "reserved u16 at offset 18")
    vec("reserved_20", message(res20=0x01000000), 0, "ReservedNotZero", "reserved u32 at offset 20 (top byte)")
    vec("reserved_before_items", message(flags=0x04, count=65), 0, "ReservedNotZero",
        "order: reserved fields before the item count")

    # ---- limits in the header ----
    vec("too_many_items_65", message(count=65), 0, "TooManyItems(65)", "one item over MAX_ITEMS, no bytes follow")
    vec("too_many_items_65535", message(count=0xFFFF, inline_len=0xFFFFFFFF), 0, "TooManyItems(65535)",
        "order: item count before inline length")
    vec("inline_too_large", message(inline_len=MAX_INLINE + 1), 0, "InlineTooLarge(65537)",
        "one byte over MAX_INLINE, no bytes follow")
    vec("inline_too_large_max", message(inline_len=0xFFFFFFFF, nfds=0xFFFF), 0, "InlineTooLarge(4294967295)",
        "order: inline length before descriptor count")
    vec("too_many_fds", message(nfds=MAX_FDS + 1, count=1, items=[]), MAX_FDS + 1, "TooManyFds(254)",
        "header declares one descriptor more than MAX_FDS")
    vec("too_many_fds_max", message(nfds=0xFFFF, count=1), 0, "TooManyFds(65535)",
        "order: descriptor limit before the length checks")

    # ---- lengths that lie ----
    two = message(op=1, items=[send, once], inline=b"0123456789")
    vec("trunc_items", two[:24 + 32], 2, "Truncated{need=98,got=56}", "two items declared, one present")
    vec("trunc_item_partial", two[:24 + 40], 2, "Truncated{need=98,got=64}", "second item cut short")
    vec("trunc_inline", two[:-5], 2, "Truncated{need=98,got=93}", "inline bytes cut short")
    vec("trunc_inline_max", message(inline_len=MAX_INLINE), 0, "Truncated{need=65560,got=24}",
        "MAX_INLINE declared, none present")
    vec("length_extra_byte", message(op=1, inline=b"abcde") + b"!", 0, "LengthMismatch{declared=29,actual=30}",
        "one byte more than declared")
    vec("length_hidden_item", message(op=1) + Item(SEND).encode(), 1, "LengthMismatch{declared=24,actual=56}",
        "an item the count does not declare")
    vec("length_before_fds", message(op=1, nfds=3) + b"xx", 0, "LengthMismatch{declared=24,actual=26}",
        "order: datagram length before descriptor count")

    # ---- descriptor counts ----
    vec("fds_header_more", message(items=[send]), 0, "FdCountMismatch{declared=1,received=0}",
        "one descriptor declared, none arrived")
    vec("fds_header_fewer", message(), 1, "FdCountMismatch{declared=0,received=1}",
        "no descriptor declared, one arrived")
    vec("fds_header_fewer_many", message(items=[send, once]), 5, "FdCountMismatch{declared=2,received=5}",
        "more descriptors arrived than declared")
    vec("fds_items_fewer", message(items=[send], nfds=2), 2, "FdCountMismatch{declared=1,received=2}",
        "header and arrival agree, items claim fewer")
    vec("fds_items_more", message(items=[send, once, send], nfds=2), 2, "FdCountMismatch{declared=3,received=2}",
        "header and arrival agree, items claim more")
    vec("fds_before_items", message(items=[Item(9)], nfds=2), 1, "FdCountMismatch{declared=2,received=1}",
        "order: header descriptor count before the items are read")

    # ---- items ----
    vec("kind_0", message(items=[Item(0)]), 1, "UnknownItemKind(0)", "kind 0 is not a kind")
    vec("kind_5", message(items=[Item(5)]), 1, "UnknownItemKind(5)", "first undefined kind")
    vec("kind_9_third", message(items=[send, once, Item(9)]), 3, "UnknownItemKind(9)", "unknown kind at item 2")
    vec("kind_255", message(items=[Item(255, fds=0)]), 0, "UnknownItemKind(255)", "largest kind byte")
    vec("send_fds_0", message(items=[Item(SEND, fds=0)]), 0, "BadItemFdCount{item=0,count=0}",
        "send right without a descriptor")
    vec("send_fds_2", message(items=[Item(SEND, fds=2)]), 2, "BadItemFdCount{item=0,count=2}",
        "send right with two descriptors")
    vec("send_once_fds_0", message(items=[send, Item(SEND_ONCE, fds=0)]), 1, "BadItemFdCount{item=1,count=0}",
        "send-once right without a descriptor")
    vec("receive_fds_0", message(items=[send, once, Item(RECEIVE, fds=0)]), 2, "BadItemFdCount{item=2,count=0}",
        "receive right without a descriptor")
    vec("region_fds_0", message(items=[region(COPY, fds=0)]), 0, "BadItemFdCount{item=0,count=0}",
        "copied region without its memfd")
    vec("region_fds_2", message(items=[region(COPY, fds=2)]), 2, "BadItemFdCount{item=0,count=2}",
        "copied region with two descriptors")
    vec("region_move_fds_2", message(items=[region(MOVE, fds=2)]), 2, "BadItemFdCount{item=0,count=2}",
        "moved region with two descriptors")
    vec("region_share_fds_0", message(items=[send, region(SHARE, fds=0)]), 1, "BadItemFdCount{item=1,count=0}",
        "shared region without its memfd, at item 1")
    vec("region_lend_fds_1", message(items=[region(LEND, fds=1, aux=1)]), 1, "BadItemFdCount{item=0,count=1}",
        "lent region without its return right")
    vec("region_lend_fds_3", message(items=[region(LEND, fds=3, aux=1)]), 3, "BadItemFdCount{item=0,count=3}",
        "lent region with a third descriptor")
    vec("fdcount_before_reserved", message(items=[Item(SEND, fds=2, mode=1)]), 2, "BadItemFdCount{item=0,count=2}",
        "order: an item's descriptor count before its reserved fields")
    vec("send_mode", message(items=[Item(SEND, mode=1)]), 1, "ReservedNotZero", "send right with a mode")
    vec("send_flags", message(items=[Item(SEND, flags=0x80000000)]), 1, "ReservedNotZero", "send right with flags")
    vec("send_once_len", message(items=[Item(SEND_ONCE, length=1)]), 1, "ReservedNotZero",
        "send-once right with a length")
    vec("send_addr", message(items=[Item(SEND, addr=0x1000)]), 1, "ReservedNotZero", "send right with an address")
    vec("receive_aux", message(items=[Item(RECEIVE, fds=2, aux=1)]), 2, "ReservedNotZero",
        "receive right with an extra word")
    vec("item_order", message(items=[Item(SEND, aux=7), Item(9)]), 2, "ReservedNotZero",
        "order: items are checked first to last")

    # ---- regions (kind 4; see docs/regions.md) ----
    vec("kind_15", message(items=[Item(15)]), 1, "UnknownItemKind(15)", "the kind below the pager kind")
    vec("kind_17", message(items=[Item(17)]), 1, "UnknownItemKind(17)", "the kind above the pager kind")
    vec("region_mode_0", message(items=[region(0)]), 1, bad_region(0, "unknown transfer mode 0"),
        "region with mode 0, which is not a mode")
    vec("region_mode_5", message(items=[region(5)]), 1, bad_region(0, "unknown transfer mode 5"),
        "region with the first undefined mode")
    vec("region_mode_255", message(items=[send, once, region(255)]), 3, bad_region(2, "unknown transfer mode 255"),
        "region with the largest mode byte, at item 2")
    vec("region_mode_before_fds", message(items=[region(0, fds=0)]), 0, bad_region(0, "unknown transfer mode 0"),
        "order: a region's mode before its descriptor count (the count depends on the mode)")
    vec("region_fds_before_reserved", message(items=[region(COPY, fds=2, flags=0x80, aux=1)]), 2,
        "BadItemFdCount{item=0,count=2}", "order: a region's descriptor count before its flags and aux")
    vec("region_flags_4", message(items=[region(COPY, flags=0x4)]), 1, "ReservedNotZero",
        "region flag bit 2, the first undefined one")
    vec("region_flags_high", message(items=[region(LEND, flags=REGION_FLAG_HUGE | 0x80000000, aux=2)]), 2,
        "ReservedNotZero", "lent region with flag bit 31 beside a known flag")
    vec("region_aux_copy", message(items=[region(COPY, aux=1)]), 1, "ReservedNotZero",
        "copied region with an extra word (only lend has a pool slot)")
    vec("region_aux_move", message(items=[region(MOVE, aux=0x8000000000000000)]), 1, "ReservedNotZero",
        "moved region with an extra word")
    vec("region_aux_share", message(items=[region(SHARE, aux=7)]), 1, "ReservedNotZero",
        "shared region with an extra word")
    vec("region_reserved_before_len", message(items=[region(COPY, flags=0x4, length=0)]), 1, "ReservedNotZero",
        "order: a region's flags before its length")
    vec("region_len_0", message(items=[region(COPY, length=0)]), 1, bad_region(0, "zero length"),
        "region of zero bytes in version 1 (version 2 expresses it)")
    vec("region_lend_len_0", message(items=[send, region(LEND, length=0, aux=1)]), 3, bad_region(1, "zero length"),
        "lent region of zero bytes, at item 1")
    vec("region_len_over", message(items=[region(COPY, length=ISIZE_MAX + 1)]), 1,
        bad_region(0, f"length {ISIZE_MAX + 1} exceeds the address space"), "region one byte longer than isize::MAX")
    vec("region_len_u64_max", message(items=[region(SHARE, length=0xFFFF_FFFF_FFFF_FFFF)]), 1,
        bad_region(0, f"length {0xFFFF_FFFF_FFFF_FFFF} exceeds the address space"), "region of u64::MAX bytes")
    vec("region_len_before_addr", message(items=[region(COPY, length=0, addr=0x1001)]), 1,
        bad_region(0, "zero length"), "order: a region's length before its address")
    vec("region_addr_unaligned", message(items=[region(MOVE, addr=0x1001)]), 1,
        bad_region(0, "sender address 0x1001 is not page aligned or wraps"), "region address not page aligned")
    vec("region_addr_half_page", message(items=[region(COPY, addr=0x7f00_0000_0800)]), 1,
        bad_region(0, "sender address 0x7f0000000800 is not page aligned or wraps"),
        "region address at half a page")
    vec("region_addr_wraps", message(items=[region(COPY, length=0x1000, addr=0xFFFF_FFFF_FFFF_F000)]), 1,
        bad_region(0, "sender address 0xfffffffffffff000 is not page aligned or wraps"),
        "region whose end is 2^64: addr + len wraps")
    vec("region_addr_wraps_far", message(items=[region(LEND, length=ISIZE_MAX, addr=0x8000_0000_0000_1000, aux=1)]),
        2, bad_region(0, "sender address 0x8000000000001000 is not page aligned or wraps"),
        "lent region of isize::MAX bytes starting past the middle: wraps")
    vec("region_item_order", message(items=[region(COPY, length=0), region(0)]), 2, bad_region(0, "zero length"),
        "order: an earlier region's error wins over a later one's")

    # ---- pager items (kind 16; see docs/pager.md) ----
    vec("pager_fds_0", message(items=[pager(fds=0)]), 0, "BadItemFdCount{item=0,count=0}",
        "pager item without its descriptor")
    vec("pager_fds_2", message(items=[send, pager(fds=2)]), 3, "BadItemFdCount{item=1,count=2}",
        "pager item with two descriptors, at item 1")
    vec("pager_flags", message(items=[pager(flags=0x1)]), 1, "ReservedNotZero", "pager item with a flag")
    vec("pager_flags_high", message(items=[pager(PAGER_CACHE, addr=0, flags=0x80000000)]), 1, "ReservedNotZero",
        "page-cache item with flag bit 31")
    vec("pager_aux", message(items=[pager(aux=1)]), 1, "ReservedNotZero", "pager item with an extra word")
    vec("pager_fds_before_reserved", message(items=[pager(fds=2, flags=1, aux=1)]), 2,
        "BadItemFdCount{item=0,count=2}", "order: a pager item's descriptor count before its flags and aux")

    # ---- totals and the reply right ----
    vec("reply_no_items", message(flags=FLAG_REPLY), 0, "BadReplyRight", "reply flag without items")
    vec("reply_receive", message(flags=FLAG_REPLY, items=[Item(RECEIVE, fds=1), send]), 2, "BadReplyRight",
        "reply flag, item 0 a receive right")
    vec("reply_region", message(flags=FLAG_REPLY, items=[region(COPY), send]), 2, "BadReplyRight",
        "reply flag, item 0 a valid region")
    vec("reply_region_lend", message(flags=FLAG_REPLY, items=[region(LEND, aux=1)]), 2, "BadReplyRight",
        "reply flag, item 0 a lent region (its return right is not a reply right)")
    vec("reply_pager", message(flags=FLAG_REPLY, items=[pager(), once]), 2, "BadReplyRight",
        "reply flag, item 0 a valid pager item")
    vec("reply_after_region", message(flags=FLAG_REPLY, items=[region(0)]), 1, bad_region(0, "unknown transfer mode 0"),
        "order: item rules before the reply right")
    vec("reply_after_sum", message(flags=FLAG_REPLY, items=[Item(RECEIVE, fds=1)], nfds=2), 2,
        "FdCountMismatch{declared=1,received=2}", "order: descriptor total before the reply right")


def render(name, data, fds, expect, why):
    lines = [f"# {name}: {why}", f"# {len(data)} bytes, {fds} descriptors; expect {expect}"]
    return "\n".join(lines + annotate(data)) + "\n"


MANIFEST_HEAD = """\
# ferry wire-format test vectors (see docs/wire-format.md, "Test vectors").
#
# One vector per line: NAME FDS EXPECT
#   NAME    the file NAME.hex beside this one: hex bytes of one datagram,
#           whitespace ignored, '#' starts a comment to the end of the line
#   FDS     how many descriptors arrived with the datagram
#   EXPECT  what the parser must produce, one of
#           ok op=OP flags=0xFF items=KIND:FDS,... inline=LEN
#             items lists each item's kind and descriptor count in order;
#             KIND:FDS*N stands for N equal items in a row; - for none
#           ErrorName | ErrorName(VALUE) | ErrorName{field=VALUE,...}
#           BadMagic's value is the magic read as a little-endian u32, in hex;
#           BadRegion's reason is the exact text, in double quotes
#           (BadRegion{item=0,reason="zero length"}).
#
# Generated by gen.py; the files are the source of truth.
"""


def main():
    build()
    names = [v[0] for v in VECTORS]
    assert len(names) == len(set(names)), "duplicate vector name"
    files = {f"{n}.hex": render(n, d, f, e, w) for n, d, f, e, w in VECTORS}
    width = max(len(n) for n in names)
    files["vectors.txt"] = MANIFEST_HEAD + "".join(
        f"{n:<{width}}  {f:>3}  {e}\n" for n, d, f, e, w in VECTORS)
    if "--corpus" in sys.argv[1:]:
        out = sys.argv[sys.argv.index("--corpus") + 1]
        os.makedirs(out, exist_ok=True)
        for n, d, f, e, w in VECTORS:
            with open(os.path.join(out, n), "wb") as fh:
                fh.write(bytes([f & 0xFF]) + d)
        print(f"{len(VECTORS)} corpus files written to {out}")
        return
    check = "--check" in sys.argv[1:]
    stale = []
    for fname, text in sorted(files.items()):
        path = os.path.join(HERE, fname)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(fname)
            if not check:
                with open(path, "w") as f:
                    f.write(text)
    extra = sorted(f for f in os.listdir(HERE) if f.endswith(".hex") and f not in files)
    if check and (stale or extra):
        print("out of date:", " ".join(stale + extra))
        sys.exit(1)
    for f in extra:
        os.remove(os.path.join(HERE, f))
    print(f"{len(VECTORS)} vectors; {'checked' if check else 'written'}: {len(stale)} changed, {len(extra)} removed")


if __name__ == "__main__":
    main()
