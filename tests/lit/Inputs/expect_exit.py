#!/usr/bin/python3
"""usage: expect_exit.py CODE COMMAND... — runs COMMAND, passes its output through, and
succeeds only when it exits with CODE (lit's `not` accepts any non-zero status)."""
import subprocess
import sys

want = int(sys.argv[1])
got = subprocess.run(sys.argv[2:]).returncode
if got != want:
    sys.exit(f"expect_exit: {' '.join(sys.argv[2:])} exited {got}, expected {want}")
