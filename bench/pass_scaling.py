#!/usr/bin/env python3
"""Time per pass on a chain of 10,000 and 100,000 nodes (listed in order and consumers first),
and on a chain of as many nodes where every node is rewritten (folds, merges, batch norms).

Runs `kiln opt -O1 --time-passes` (which prints each pass's time) and `kiln run
--backend=reference` on models written by tests/lit/Inputs/make_chain.py, and prints the pass
timings, the wall time and the peak memory of each run. A benchmark, not a test: it asserts
nothing (tests/lit/scale/chain.test checks that the 100,000-node chain goes through).

Usage: bench/pass_scaling.py [--kiln build/kiln] [--sizes 10000,100000]
"""
import argparse
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(argv):
    """Runs argv; returns (stdout+stderr, seconds, peak RSS in MiB) of that process alone."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"pass_scaling: {' '.join(argv)} failed:\n{output[-2000:]}")
    return output, seconds, usage.ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", default=str(ROOT / "build" / "kiln"))
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    make_chain = ROOT / "tests" / "lit" / "Inputs" / "make_chain.py"
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            for order in ("in order", "consumers first", "rewrites"):
                model = pathlib.Path(tmp) / f"chain{n}.json"
                x = pathlib.Path(tmp) / "x.npy"
                flags = {"in order": [], "consumers first": ["--reverse"], "rewrites": ["--rewrites"]}
                subprocess.run([sys.executable, str(make_chain), str(n), str(model), "--input", str(x)]
                               + flags[order], check=True)
                out, opt_s, opt_mb = run([args.kiln, "opt", str(model), "-O1", "--time-passes",
                                          "-o", os.devnull])
                print(f"== {n} nodes, {order}: kiln opt -O1 {opt_s:.2f} s, peak {opt_mb:.0f} MiB")
                for line in out.splitlines():
                    if re.match(r"//\s+\S+\s+[0-9.]+ ms", line):
                        print("   " + line[2:].strip())
                _, run_s, run_mb = run([args.kiln, "run", str(model), "--backend=reference",
                                        "--input", f"x={x}", "--output-dir", tmp])
                print(f"   kiln run --backend=reference {run_s:.2f} s, peak {run_mb:.0f} MiB")


if __name__ == "__main__":
    main()
