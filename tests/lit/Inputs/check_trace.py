#!/usr/bin/python3
"""usage: check_trace.py TRACE.json KERNELS.txt — checks a `kiln run --profile` trace against
the kernel table (`kiln emit --emit=kernels`): valid JSON in the Trace Event Format, one complete
event per kernel in launch order, each named after its kernel, with its source nodes, a start
and a duration, none overlapping the next."""
import json
import re
import sys

trace = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read()
kernels = re.findall(r"^([a-z][a-z0-9_]*_\d+)\s+\(", table, re.MULTILINE)
assert kernels, "no kernels in the table"
events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
names = [e["name"] for e in events]
assert names == kernels, f"events {names} != kernels {kernels}"
end = 0.0
for event in events:
    assert event["cat"] == "kernel" and event["dur"] >= 0, event
    assert event["ts"] >= end - 1e-3, f"{event['name']} starts before the previous kernel ended"
    end = event["ts"] + event["dur"]
    assert event["args"]["source_nodes"], event
    assert all(re.fullmatch(r".+ \([a-z0-9_]+\)", n) for n in event["args"]["source_nodes"]), event
print(f"{len(events)} kernel events, {end:.0f} us in all")
