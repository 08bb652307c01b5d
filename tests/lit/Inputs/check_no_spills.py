#!/usr/bin/python3
"""Reads a kernel table from stdin (`kiln emit --emit=kernels`, or `kiln inspect`); fails if any
kernel spills on any arch, or, where the table has a stack column (kiln emit), has a stack
frame (local memory: an array indexed at run time)."""
import re
import sys

rows = 0
has_stack = False
for line in sys.stdin:
    if re.search(r"\| sm_\d+: regs spill stack", line):
        has_stack = True
        continue
    pattern = r"\| (sm_\d+):\s+(\d+)\s+(\d+)\s+(\d+)" if has_stack else r"\| (sm_\d+):\s+(\d+)\s+(\d+)()"
    for arch, regs, spill, stack in re.findall(pattern, line):
        rows += 1
        if int(spill) != 0:
            sys.exit(f"spills: {line.strip()}")
        if stack and int(stack) != 0:
            sys.exit(f"stack frame: {line.strip()}")
if rows == 0:
    sys.exit("no kernel rows with ptxas figures in the input")
print(f"{rows} kernel/arch rows, no spills{', no stack frames' if has_stack else ''}")
