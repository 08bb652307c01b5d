#!/usr/bin/python3
"""Validates models against docs/model.schema.json (Debian's python3-jsonschema).

usage: check_schema.py SCHEMA MODEL.json...
Also checks that the schema rejects a model with a typo'd key, so a schema that accepts
everything cannot pass.
"""
import json
import sys

import jsonschema

schema_path, models = sys.argv[1], sys.argv[2:]
with open(schema_path) as f:
    schema = json.load(f)
validator = jsonschema.Draft202012Validator(schema)
validator.check_schema(schema)

for path in models:
    with open(path) as f:
        model = json.load(f)
    errors = sorted(validator.iter_errors(model), key=lambda e: list(e.path))
    if errors:
        sys.exit(f"{path}: " + "; ".join(f"/{'/'.join(map(str, e.path))}: {e.message}" for e in errors))

broken = {"format": "kiln.model", "version": 1, "inputs": [], "outputs": ["x"], "node": []}
if validator.is_valid(broken):
    sys.exit("the schema accepts an unknown top-level key")
print(f"schema: {len(models)} models valid")
