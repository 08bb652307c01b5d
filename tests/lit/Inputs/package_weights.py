"""How a kiln package stores its weights (docs/packages.md, "The file"): per package the bytes
of its weights as stored and, for each weight stored as a bitmask, its share of zeros; then that
the files differ by what their weights do (the rest of the package is the same).

Usage: package_weights.py DENSE.kiln PACKAGE.kiln...
"""
import json
import os
import struct
import sys

import numpy as np


def manifest(path):
    data = open(path, "rb").read()
    size = struct.unpack("<Q", data[24:32])[0]
    return json.loads(data[64:64 + size].rstrip(b" \0"))


def main():
    totals = {}
    for path in sys.argv[1:]:
        m = manifest(path)
        total = sum(w["bytes"] for w in m["weights"])
        totals[path] = total
        sparse = []
        for w in m["weights"]:
            if w.get("encoding") != "bitmask" or len(w["shape"]) < 2:
                continue
            elements = int(np.prod(w["shape"]))
            sparse.append(f"{w['name']} bitmask {100 * (1 - w['nonzeros'] / elements):.1f} % zeros")
        print(f"{os.path.basename(path)}: weights {total} bytes" + "".join(", " + s for s in sparse))
    dense, pruned = sys.argv[1], sys.argv[2]
    file_difference = os.path.getsize(dense) - os.path.getsize(pruned)
    weights_difference = totals[dense] - totals[pruned]
    # Sections sit at multiples of 64 bytes: the files may differ by that much more or less.
    same = abs(file_difference - weights_difference) < 64 * 4
    print("file sizes: dense - pruned = weights' difference" if same else
          f"file sizes differ by {file_difference}, weights by {weights_difference}")


if __name__ == "__main__":
    main()
