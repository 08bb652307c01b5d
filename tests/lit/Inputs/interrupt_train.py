#!/usr/bin/python3
"""usage: interrupt_train.py SIGNAL CHECKPOINT KILN ARGS... — starts `KILN ARGS...` with its
stdout on a pipe, reads it line by line (kiln flushes each line when piped), sends SIGNAL once
the first training step can have run, and checks what issue 14 asks of an interrupted `kiln
train`: exit status 130, a checkpoint written, no partial files beside it. Prints kiln's output."""
import os
import signal
import subprocess
import sys
import time

sig = getattr(signal, sys.argv[1])
checkpoint = sys.argv[2]
process = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines = []
for line in process.stdout:
    lines.append(line)
    sys.stdout.write(line)
    sys.stdout.flush()
    if line.startswith(("compiled the training step", "loaded the training step")):
        time.sleep(0.5)
        process.send_signal(sig)
        break
rest = process.stdout.read()
sys.stdout.write(rest)
status = process.wait()
print(f"exit status {status}")
folder = os.path.dirname(os.path.abspath(checkpoint))
leftovers = [name for name in os.listdir(folder) if ".tmp" in name or "probe" in name]
print(f"checkpoint {'written' if os.path.exists(checkpoint) else 'missing'}; leftovers {leftovers}")
