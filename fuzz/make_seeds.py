#!/usr/bin/env python3
"""Write the small seed corpora of the fuzz targets to fuzz/corpus/<target>/.

Each seed is a valid input in the target's own encoding (see the comment at the
top of each fuzz/fuzz_*.c): a few parameter bytes, then length-prefixed strings
(one length byte; 255 means a 2-byte little-endian length follows).
Deterministic; run it again after changing an input format:
    python3 fuzz/make_seeds.py
"""
import hashlib
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def strs(*items) -> bytes:
    out = b""
    for s in items:
        b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
        if len(b) < 255:
            out += bytes([len(b)]) + b
        else:
            out += b"\xff" + struct.pack("<H", len(b))[:2] + b
    return out


TEXTS = [
    "hello",
    "Hello, World! This is a longer string.",
    "",
    "caf\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e",
    b"bad \xff\xfe utf8 \xed\xa0\x80 surrogate \xc0\xaf overlong",
    "line one\r\nline two\r\n\n\n\n\nline three   \t \n",
    "ctrl\x01\x02\x7f chars\u00a0nbsp\u3000ideo\u2028sep",
    "exactly12byt",
    "thirteen byte",
]

PROSE = (
    "The quick brown fox jumps over the lazy dog. It was the best of times, and it was the "
    "worst of times. We have to go to the market with the children, and that is that.\n"
    "Every line here ends with punctuation. The report was published in 2021 by the team.\n"
    "They said that the results would be shared with all of the members of the group.\n"
    "Nobody knew what to expect, but the weather was fine and the roads were clear.\n"
    "In the end the meeting was short, and everyone went home before the rain started.\n"
)

PII = [
    "mail john.doe@example.com or jane@corp.co.uk today",
    "server 192.168.1.10 and 8.8.8.8, v6 2001:db8::1 and fe80::1%eth0",
    "call +1 (415) 555-2671 or 212-555-0199",
    "card 4111 1111 1111 1111 and 5500-0000-0000-0004",
    "iban DE89 3704 0044 0532 0130 00 and GB82WEST12345698765432",
    "version 1.2.3.4 and v2.0.0.1 are not addresses; 2023-01-02 is a date",
]


def write(target: str, name: str, data: bytes) -> None:
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def wal_record(first_lsn: int, hashes) -> bytes:
    payload = b"".join(struct.pack("<QQ", lo, hi) for lo, hi in hashes)
    h = b"LMR1" + struct.pack("<IQI", len(hashes), first_lsn, crc32c(payload))
    return h + struct.pack("<I", crc32c(h)) + payload


def main() -> None:
    # builder_layout: mode byte (block size / validate / threads), then strings;
    # 0x80 modes: raw views or offsets after a payload.
    write("builder_layout", "basic", b"\x01" + strs(*TEXTS))
    write("builder_layout", "validate", b"\x06" + strs(*TEXTS))
    write("builder_layout", "threads", b"\x0b" + strs(*(TEXTS * 4)))
    views = struct.pack("<I12s", 5, b"hello") + struct.pack("<I4sII", 20, b"abcd", 1, 2)
    write("builder_layout", "raw_views", b"\x80\x00\x20" + b"xxabcdefghijklmnopqrstuvwxyz0123" + views)
    write("builder_layout", "raw_offsets", b"\xc0\x00\x10" + b"0123456789abcdef" + struct.pack("<5i", 0, 3, 3, 9, 16))

    # cleaner: two parameter bytes, then documents
    write("cleaner", "defaults", b"\x00\x03" + strs(*TEXTS))
    write("cleaner", "nfkc", b"\x02\x01" + strs(*TEXTS))
    write("cleaner", "threads_limit", b"\x00\x86" + strs(*TEXTS))
    write("cleaner", "raw", b"\xfc\x00" + strs(*TEXTS))

    # quality
    write("quality", "prose", b"\x00\x00" + strs(PROSE, PROSE * 3, "lorem ipsum dolor sit amet {x}"))
    write("quality", "relaxed", b"\x20\x09" + strs(*TEXTS, PROSE))
    write("quality", "c4_only", b"\x0b\x00" + strs(PROSE + "Please enable javascript.\n[1] cite\n"))

    # pii: mode byte (bit 0: datatrove), type byte
    write("pii", "strict", b"\x00\x3f" + strs(*PII))
    write("pii", "datatrove", b"\x09\x00" + strs(*PII))
    write("pii", "public_only", b"\x06\x03" + strs(*PII))

    # pipeline: stage-off bits, options, batch split, then documents
    mixed = TEXTS + PII + [PROSE, PROSE, TEXTS[1]]
    write("pipeline", "all_stages", b"\x00\x05\x07" + strs(*mixed))
    write("pipeline", "datatrove_nfc", b"\x10\x15\x03" + strs(*mixed))
    write("pipeline", "no_cleaner", b"\x01\x47\x02" + strs(*mixed))
    write("pipeline", "dedup_only", b"\x0b\x00\x04" + strs(*(mixed + mixed)))

    # wal: mode byte, then ops (0/1 valid record, 2 raw, 3 flip, 4 cut, 5 stale copy)
    h16 = lambda k: hashlib.blake2b(bytes([k]), digest_size=16).digest()  # noqa: E731
    write("wal", "records", b"\x00" + b"\x00\x03" + h16(1) + h16(2) + h16(3) + h16(3) + b"\x01\x01" + h16(4) + h16(5))
    write("wal", "torn_tail", b"\x10" + b"\x00\x02" + h16(1) + h16(2) + h16(3) + b"\x04\x07")
    write("wal", "mid_corrupt", b"\x00" + b"\x00\x01" + h16(1) + h16(2) + b"\x03\x50\x00\x03" + b"\x00\x01" + h16(7) + h16(8))
    write("wal", "small_keys", b"\x20" + b"\x40\x07" + bytes(range(8)) + b"\x02\x05abcde")

    # snapshot: mode, n_before, [n_after], hash bytes, then damage ops
    write("snapshot", "clean", b"\x08\x20" + bytes(range(96)))
    write("snapshot", "after", b"\x09\x10\x05" + bytes(range(60)) + b"\x00\x10\x00")
    write("snapshot", "forged_field", b"\x0c\x08" + bytes(range(24)) + b"\x01\x01\x01\x20\x00")
    write("snapshot", "crowded", b"\x0a\x40" + bytes(range(192)) + b"\x02\x40\x00")

    # state: mode byte, 128 file bytes (slots), then the coordinate to commit
    def slot(seq, coord, version=1):
        body = struct.pack("<HHIQQQQQQI", 0x534C, version, coord[0], seq, *coord[1:6], coord[6])
        return body + struct.pack("<I", crc32c(body))
    c = (1, 10, 100, 4096, 7, 5, 0)
    coord = struct.pack("<IIQQQQQ", 2, 1, 11, 101, 5000, 8, 6)
    write("state", "both_valid", b"\x00" + slot(3, c) + slot(4, c) + coord + b"\x05" * 8)
    write("state", "one_valid", b"\x00" + slot(9, c) + bytes(64) + coord + b"\x01" * 8)
    write("state", "empty", b"\x00" + bytes(128) + coord + b"\x02" * 8)
    write("state", "version2", b"\x00" + slot(1, c, version=2) + slot(2, c) + coord)
    write("state", "torn", b"\x00" + slot(5, c)[:40] + bytes(24) + slot(4, c) + coord)
    write("state", "short_file", b"\x80\x40" + slot(1, c))


if __name__ == "__main__":
    main()
