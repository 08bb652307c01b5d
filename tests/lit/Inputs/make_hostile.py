#!/usr/bin/python3
"""Writes hostile inputs for tests/lit/frontend/hostile_input.test into DIR: files that are
deeply nested, binary, out of range or malformed in the ways issue 14 lists.

usage: make_hostile.py DIR
"""
import json
import pathlib
import struct
import sys

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def model(nodes=None, inputs=None, parameters=None, outputs=("y",), **extra):
    return {"format": "kiln.model", "version": 1,
            "inputs": inputs or [{"name": "x", "dtype": "f32", "shape": [2]}],
            **({"parameters": parameters} if parameters else {}),
            "nodes": nodes if nodes is not None else [{"op": "relu", "name": "y", "inputs": ["x"]}],
            "outputs": list(outputs), **extra}


def npy(header, data, version=1):
    header += " " * (-(len(header) + 11) % 64) + "\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + data


def safetensors(header_text, data=b""):
    blob = header_text.encode()
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob + data


# Nesting far deeper than any model: an array 100,000 levels deep in "metadata".
(out / "deep.json").write_text(json.dumps(model())[:-1] + ', "metadata": ' + "[" * 100000 + "]" * 100000 + "}")
# A deep object inside a node's attrs, the path that once deep-copied the nodes.
(out / "deep_attr.json").write_text(
    json.dumps(model())[:-1].replace('"inputs": ["x"]}', '"inputs": ["x"], "attrs": {"a": ' + '{"b": ' * 5000 + "1" + "}" * 5000 + "}}") + "}")
# Numbers out of range, and JSON types where numbers belong.
(out / "huge_exponent.json").write_text(json.dumps(model(), indent=1).replace('"shape": [\n    2\n   ]', '"shape": [1e999]'))
(out / "negative_huge.json").write_text(
    '{"format": "kiln.model", "version": 1, "inputs": [{"name": "x", "shape": [2]}],\n'
    ' "nodes": [{"op": "leaky_relu", "name": "y", "inputs": ["x"], "attrs": {"alpha": -1e999}}],\n'
    ' "outputs": ["y"]}\n')
# Found by fuzz_model_json: a number that overflows followed by more number characters.
(out / "overflow_then_dot.json").write_text('{\n  "format": 1e999.mdel",\n  "version": 1}\n')
# Duplicate keys: nlohmann would keep the last silently. A second "inputs" at the top; a node with
# two "op"s; the same key in two different objects is fine.
(out / "duplicate_key.json").write_text(
    '{"format": "kiln.model", "version": 1,\n "inputs": [{"name": "x", "shape": [2]}],\n'
    ' "nodes": [{"op": "relu", "name": "y", "inputs": ["x"]}],\n "inputs": [],\n "outputs": ["y"]}\n')
(out / "duplicate_node_key.json").write_text(
    '{"format": "kiln.model", "version": 1, "inputs": [{"name": "x", "shape": [2]}],\n'
    ' "nodes": [{"op": "relu", "name": "y", "op": "tanh", "inputs": ["x"]}], "outputs": ["y"]}\n')
(out / "bool_dim.json").write_text(json.dumps(model(inputs=[{"name": "x", "shape": [True]}])))
(out / "huge_int_dim.json").write_text(json.dumps(model()).replace('"shape": [2]', '"shape": [18446744073709551616]'))
(out / "minus_zero_dim.json").write_text(json.dumps(model()).replace('"shape": [2]', '"shape": [-0]'))
(out / "string_version.json").write_text(json.dumps(model()).replace('"version": 1', '"version": "1"'))
(out / "f32_overflow.json").write_text(json.dumps(model(
    nodes=[{"op": "add", "name": "y", "inputs": ["x", "w"]}],
    parameters=[{"name": "w", "dtype": "f32", "shape": [2], "data": [1.0, 1e300]}])))
(out / "i32_fraction.json").write_text(json.dumps(model(
    inputs=[{"name": "x", "dtype": "i32", "shape": [2]}],
    nodes=[{"op": "add", "name": "y", "inputs": ["x", "w"]}],
    parameters=[{"name": "w", "dtype": "i32", "shape": [2], "data": [1, 2.5]}])))
(out / "i64_range.json").write_text(json.dumps(model(
    inputs=[{"name": "x", "dtype": "i64", "shape": [1]}],
    nodes=[{"op": "add", "name": "y", "inputs": ["x", "w"]}],
    parameters=[{"name": "w", "dtype": "i64", "shape": [1], "data": [1e19]}])))
(out / "dtype_alias.json").write_text(json.dumps(model(inputs=[{"name": "x", "dtype": "float32", "shape": [2]}])))
# User strings with a newline and a NUL: the error stays on one line.
(out / "newline_name.json").write_text(json.dumps(model(
    nodes=[{"op": "relu", "name": "y", "inputs": ["no\nsuch\u0000value"]}])))
# Consumers listed before producers, 5,000 deep (scale/chain.test goes to 100,000).
chain = [{"op": "neg", "name": f"n{i}", "inputs": [f"n{i - 1}" if i else "x"]} for i in range(5000)]
(out / "reversed_chain.json").write_text(json.dumps(model(nodes=chain[::-1], outputs=("n4999",))))
# Binary files given as models.
(out / "model.onnx.bin").write_bytes(b"\x08\x08\x12\x07pytorch\x1a\x052.1.0:\x10\n\x0e\n\x01x\x12\x01y\"\x04Relu")
(out / "model.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 32)
(out / "weights_as_model").write_bytes(safetensors('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0\0\0\0"))
(out / "random.bin").write_bytes(bytes(range(256)) * 4)
# .npy headers: a key twice, a nested tuple, f64 data beyond f32, a shape too large.
f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
(out / "dup_key.npy").write_bytes(npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8))
(out / "nested.npy").write_bytes(npy("{'descr': '<f4', 'fortran_order': False, 'shape': " + "(" * 1000 + ")" * 1000 + ", }", b""))
(out / "f64_overflow.npy").write_bytes(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", struct.pack("<2d", 1.0, 1e300)))
(out / "nan.npy").write_bytes(npy(f4, struct.pack("<2f", float("nan"), float("nan"))))
(out / "some_nan.npy").write_bytes(npy(f4, struct.pack("<2f", float("nan"), 3.0)))
(out / "huge_shape.npy").write_bytes(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", b""))
# safetensors headers: a number JSON can spell but no double holds; f64 data beyond f32; a
# tensor name with a newline.
(out / "huge_number.safetensors").write_bytes(safetensors('{"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}}', b"\0" * 4))
(out / "f64_overflow.safetensors").write_bytes(safetensors('{"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}', struct.pack("<2d", 2.0, -1e300)))
(out / "duplicate.safetensors").write_bytes(safetensors('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\0" * 8))
(out / "newline.safetensors").write_bytes(safetensors('{"w\\nx":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"\0" * 4))
for name in ("huge_number", "f64_overflow", "newline", "duplicate"):
    (out / f"uses_{name}.json").write_text(json.dumps(model(
        nodes=[{"op": "add", "name": "y", "inputs": ["x", "w"]}],
        parameters=[{"name": "w", "dtype": "f32", "shape": [2], "file": f"{name}.safetensors"}])))
