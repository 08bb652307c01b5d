#!/usr/bin/python3
"""usage: expect_exit.py CODE COMMAND... — runs COMMAND, passes its output through, and
succeeds only when it exits with CODE, a status from 0 to 125 (lit's `not` accepts any non-zero
status, a crash included). A crash (a signal) or a sanitizer's report never counts as the
expected status: the sanitizers exit 86 (AddressSanitizer) and 87 (UndefinedBehaviorSanitizer),
as lit.cfg.py and scripts/test.sh set them, and those codes cannot be asked for."""
import signal
import subprocess
import sys

# Statuses that mean "the program did not end on its own terms".
SANITIZER_EXITS = {86: "AddressSanitizer", 87: "UndefinedBehaviorSanitizer"}

want = int(sys.argv[1])
if not 0 <= want <= 125 or want in SANITIZER_EXITS:
    sys.exit(f"expect_exit: cannot expect status {want}: it is a crash, a sanitizer report or a "
             f"shell's 'cannot run'")
command = sys.argv[2:]
got = subprocess.run(command).returncode
if got == want:
    sys.exit(0)
if got < 0:
    try:
        how = f"was killed by {signal.Signals(-got).name}"
    except ValueError:
        how = f"was killed by signal {-got}"
elif got in SANITIZER_EXITS:
    how = f"exited {got} ({SANITIZER_EXITS[got]} found an error)"
else:
    how = f"exited {got}"
sys.exit(f"expect_exit: {' '.join(command)} {how}, expected exit status {want}")
