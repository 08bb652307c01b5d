#!/usr/bin/python3
"""Checks that print -> parse -> print is a fixed point for each model file.

usage: check_roundtrip.py KILN FILE_OR_DIR...  (directories: every *.json model and *.ir graph
under them that kiln accepts; files that kiln rejects on purpose, such as error tests, are
skipped only when they come from a directory scan)
"""
import os
import subprocess
import sys
import tempfile

kiln, targets = sys.argv[1], sys.argv[2:]
files, strict = [], set()
for target in targets:
    if os.path.isdir(target):
        for root, _, names in os.walk(target):
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith((".json", ".ir"))]
    else:
        files.append(target)
        strict.add(target)

checked = 0
with tempfile.TemporaryDirectory() as tmp:
    for path in files:
        first = subprocess.run([kiln, "opt", path], capture_output=True, text=True)
        if first.returncode != 0:
            if path in strict:
                sys.exit(f"{path}: kiln opt failed:\n{first.stderr}")
            continue
        # Print the dump next to nothing in particular: paths inside it are absolute.
        dump = os.path.join(tmp, "dump.ir")
        with open(dump, "w") as f:
            f.write(first.stdout)
        second = subprocess.run([kiln, "opt", dump], capture_output=True, text=True)
        if second.returncode != 0:
            sys.exit(f"{path}: the printed IR does not parse:\n{second.stderr}\n{first.stdout}")
        if second.stdout != first.stdout:
            sys.exit(f"{path}: print -> parse -> print is not a fixed point:\n"
                     f"--- first\n{first.stdout}\n--- second\n{second.stdout}")
        checked += 1
print(f"round-trip: {checked} graphs are fixed points")
