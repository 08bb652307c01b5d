#!/usr/bin/python3
"""Reads `kiln emit --emit=kernels` from stdin; fails if any kernel spills on any arch."""
import re
import sys

rows = 0
for line in sys.stdin:
    for arch, regs, spill in re.findall(r"\| (sm_\d+):\s+(\d+)\s+(\d+)", line):
        rows += 1
        if int(spill) != 0:
            sys.exit(f"spills: {line.strip()}")
if rows == 0:
    sys.exit("no kernel rows with ptxas figures in the input")
print(f"{rows} kernel/arch rows, no spills")
