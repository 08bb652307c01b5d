#!/usr/bin/python3
"""usage: damage_package.py HOW IN OUT — writes a damaged copy of package IN to OUT.
HOW: truncate (drop the last half), magic (not a package), newer (format version + 1, header
checksum resealed so only the version is wrong), flip (one bit of the last section), reserved
(a reserved header byte), padding (a zero byte between two sections)."""
import json
import struct
import sys
import zlib

how, source, target = sys.argv[1:4]
data = bytearray(open(source, "rb").read())
if how == "truncate":
    data = data[: len(data) // 2]
elif how == "magic":
    data[0:8] = b"PK\x03\x04junk"[:8]
elif how == "newer":
    version = struct.unpack_from("<I", data, 8)[0]
    struct.pack_into("<I", data, 8, version + 1)
    struct.pack_into("<I", data, 36, zlib.crc32(bytes(data[:36])))
elif how == "flip":
    data[-1] ^= 1
elif how == "reserved":
    data[50] = 1
elif how == "padding":
    size = struct.unpack_from("<Q", data, 24)[0]
    sections = sorted((s["offset"], s["bytes"]) for s in json.loads(bytes(data[64:64 + size]))["sections"])
    gap = next(o + n for (o, n), (next_o, _) in zip(sections, sections[1:]) if o + n < next_o)
    data[gap] = 0x20
else:
    sys.exit(f"unknown damage '{how}'")
open(target, "wb").write(data)
