#!/usr/bin/python3
"""Writes a small safetensors file for lit tests, with ways to break it.

usage: make_safetensors.py OUT NAME:DTYPE:D0xD1... [...] [--truncate N] [--bad-offsets NAME]
Tensor data is 0, 1, 2, ... in the given dtype. --truncate cuts the file to N bytes;
--bad-offsets makes NAME's data_offsets one element short of its shape.
"""
import argparse
import json
import struct

SIZES = {"F32": 4, "F64": 8, "F16": 2, "I32": 4, "I64": 8, "BOOL": 1}
FORMATS = {"F32": "f", "F64": "d", "F16": "e", "I32": "i", "I64": "q", "BOOL": "?"}

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("tensors", nargs="+")
parser.add_argument("--truncate", type=int)
parser.add_argument("--bad-offsets")
args = parser.parse_args()

header, data = {}, b""
for spec in args.tensors:
    name, dtype, dims = spec.split(":")
    shape = [int(d) for d in dims.split("x")] if dims else []
    count = 1
    for d in shape:
        count *= d
    payload = struct.pack("<%d%s" % (count, FORMATS[dtype]), *[i % 2 if dtype == "BOOL" else i for i in range(count)])
    end = len(data) + len(payload)
    if args.bad_offsets == name:
        end -= SIZES[dtype]
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), end]}
    data += payload

blob = json.dumps(header).encode()
blob += b" " * (-len(blob) % 8)
content = struct.pack("<Q", len(blob)) + blob + data
if args.truncate is not None:
    content = content[: args.truncate]
with open(args.out, "wb") as f:
    f.write(content)
