#!/usr/bin/python3
"""Checks that print -> parse -> print is a fixed point for each model file.

usage: check_roundtrip.py KILN FILE_OR_DIR...  (directories: every *.json model and *.ir graph
under them)

Every file is checked; none is skipped. An .ir file with "// -----" lines holds several graphs
(lit's --split-input-file cases): it is read with --split-input-file and each of its graphs must
parse, print, and print the same again. `kiln opt` must accept every graph (it parses and
verifies; the error cases of the pass tests fail in their passes, not here). Prints
"round-trip: F files, G graphs are fixed points".
"""
import os
import subprocess
import sys
import tempfile

SPLIT = "// -----"


def graphs_in(path):
    """How many graphs the file holds: one, or one per "// -----"-separated chunk."""
    if not path.endswith(".ir"):
        return 1
    with open(path, encoding="utf-8") as f:
        return 1 + sum(1 for line in f if line.startswith(SPLIT))


def opt(kiln, path, split):
    command = [kiln, "opt", path] + (["--split-input-file"] if split else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        how = (f"was killed by signal {-result.returncode}" if result.returncode < 0
               else f"exited {result.returncode}")
        sys.exit(f"{' '.join(command)} {how}:\n{result.stderr}")
    return result.stdout


def main():
    kiln, targets = sys.argv[1], sys.argv[2:]
    files = []
    for target in targets:
        if os.path.isdir(target):
            for root, dirs, names in os.walk(target):
                dirs.sort()
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith((".json", ".ir"))]
        else:
            files.append(target)
    if not files:
        sys.exit(f"no .json or .ir files in {' '.join(targets)}")

    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            count = graphs_in(path)
            split = count > 1
            first = opt(kiln, path, split)
            printed = 1 + first.count("\n" + SPLIT + "\n")
            if printed != count:
                sys.exit(f"{path}: {count} graphs, kiln opt printed {printed}:\n{first}")
            # Print the dump next to nothing in particular: paths inside it are absolute.
            dump = os.path.join(tmp, "dump.ir")
            with open(dump, "w", encoding="utf-8") as f:
                f.write(first)
            second = opt(kiln, dump, split)
            if second != first:
                sys.exit(f"{path}: print -> parse -> print is not a fixed point:\n"
                         f"--- first\n{first}\n--- second\n{second}")
            checked += count
    print(f"round-trip: {len(files)} files, {checked} graphs are fixed points")


if __name__ == "__main__":
    main()
