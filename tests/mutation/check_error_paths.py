#!/usr/bin/python3
"""Mutation check of the error-path lit tests: each must fail against a kiln that is broken
after printing its diagnostic.

usage: check_error_paths.py [--lit LIT_PY] --build BUILD_DIR --work DIR
                            --modes crash,exit0 [--fault PROG] [FILE...]

An error-path test is a lit file with a RUN line `%expect_exit N kiln ...` (N != 0), or one
that runs kiln under lit's `not`: kiln must print a diagnostic and exit N. A test that passes
whatever kiln's exit, or on a crash once the message is out, guards nothing (lit's own `not`
accepts a segfault; a sanitizer exits 1 by default, like kiln's user errors). For each mode
the check writes a wrapper DIR/MODE/kiln that runs the real kiln and, when that fails, ends as
the mode says:

  crash  kill itself with SIGSEGV          asan   run PROG asan (a heap-use-after-free)
  exit0  exit 0                            ubsan  run PROG ubsan (a signed overflow)

and runs lit once over the error-path files with --param kiln_dir=DIR/MODE (tests/lit/lit.cfg.py
puts it first on PATH and in %kiln). Every file must fail, and fail at an exit-status check (a
RUN line with Inputs/expect_exit.py), not for some unrelated reason. A kiln that succeeds is
left alone, so the other RUN lines of a file behave as usual.

lit stops a file at its first failing line, so the run sees one error path per file; a static
pass over every lit file covers the rest: no RUN line may run kiln (or a %python helper) under
lit's `not`. FILEs (relative to tests/lit) restrict the run to those files.
"""
import argparse
import json
import os
import re
import shlex
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIT_SOURCE = os.path.join(os.path.dirname(HERE), "lit")
LIT_PY = "/usr/lib/llvm-14/build/utils/lit/lit.py"
SUFFIXES = (".ir", ".test")

MODES = ("crash", "exit0", "asan", "ubsan")

WRAPPER = """#!/bin/bash
# Written by tests/mutation/check_error_paths.py: the real kiln, broken after its diagnostic.
{real} "$@"
status=$?
[ "$status" = 0 ] && exit 0
echo "$status $*" >> {log}
{ending}
"""
ENDINGS = {
    "crash": "ulimit -c 0; kill -SEGV $$",
    "exit0": "exit 0",
    "asan": "exec {fault} asan",
    "ubsan": "exec {fault} ubsan",
}

ERROR_RUN = re.compile(r"%expect_exit\s+([0-9]+)\s+(?:env\s+(?:\S+=\S*\s+)*)?(%kiln|kiln)(\s|$)")
# A pipeline stage that runs kiln, or a helper that runs it, under lit's `not`.
NOT_KILN = re.compile(r"(^|[|;&]\s*)(env\s+(\S+=\S*\s+)*)?not\s+(--crash\s+)?(env\s+(\S+=\S*\s+)*)?"
                      r"(%kiln|kiln|%python|%expect_exit)(\s|$)")


def run_lines(path):
    """The RUN commands of a lit file, continuation lines joined."""
    commands, current = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.search(r"RUN:(.*)$", line)
            if not m:
                continue
            text = m.group(1).strip()
            current = text if current is None else current + " " + text
            if current.endswith("\\"):
                current = current[:-1].rstrip()
                continue
            commands.append(current)
            current = None
    return commands


def lit_files():
    for root, dirs, names in os.walk(LIT_SOURCE):
        dirs[:] = sorted(d for d in dirs if d != "Inputs")
        for name in sorted(names):
            if name.endswith(SUFFIXES):
                yield os.path.relpath(os.path.join(root, name), LIT_SOURCE)


def error_path_files():
    """Files that run kiln expecting it to fail: under %expect_exit N (N != 0), or lit's `not`."""
    def expects_failure(command):
        return NOT_KILN.search(command) or any(int(m.group(1)) != 0
                                               for m in ERROR_RUN.finditer(command))
    return [f for f in lit_files()
            if any(expects_failure(c) for c in run_lines(os.path.join(LIT_SOURCE, f)))]


def unguarded_runs():
    return [f"{f}: RUN: {c}" for f in lit_files() for c in run_lines(os.path.join(LIT_SOURCE, f))
            if NOT_KILN.search(c)]


def write_wrapper(folder, mode, real, fault):
    os.makedirs(folder, exist_ok=True)
    log = os.path.join(folder, "calls.log")
    if os.path.exists(log):
        os.remove(log)
    path = os.path.join(folder, "kiln")
    with open(path, "w") as f:
        f.write(WRAPPER.format(real=shlex.quote(real), log=shlex.quote(log),
                               ending=ENDINGS[mode].format(fault=shlex.quote(fault or ""))))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def fails_at_exit_check(output):
    """Whether the RUN line lit stopped at (its last, in -v output) runs Inputs/expect_exit.py.
    Only the wrapper's kiln calls differ from a passing run, so that line is where a broken
    kiln was caught. (The message of expect_exit.py itself often goes into a pipe or
    /dev/null, so the output need not show it.)"""
    last_line = output.rsplit('$ ":" "RUN: at line', 1)[-1]
    return "expect_exit.py\"" in last_line


def check_mode(mode, files, args):
    """Runs lit once over `files` against the broken kiln; returns the complaints."""
    folder = os.path.join(os.path.abspath(args.work), mode)
    write_wrapper(folder, mode, os.path.join(os.path.abspath(args.build), "kiln"), args.fault)
    results = os.path.join(folder, "results.json")
    site = os.path.join(os.path.abspath(args.build), "tests", "lit")
    command = [sys.executable, args.lit, "-s", "-v", f"--param=kiln_dir={folder}",
               f"--param=exec_root={os.path.join(folder, 'out')}", "-o", results]
    command += [os.path.join(site, f) for f in files]
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(results, encoding="utf-8") as f:
        tests = {t["name"].split(" :: ", 1)[1]: t for t in json.load(f)["tests"]}
    complaints = []
    for name in files:
        test = tests.get(name)
        if test is None:
            complaints.append(f"{mode}: {name}: lit did not run it")
        elif test["code"] != "FAIL":
            complaints.append(f"{mode}: {name}: {test['code']} against a kiln that "
                              f"{describe(mode)} after its diagnostic")
        elif not fails_at_exit_check(test.get("output", "")):
            tail = "\n".join(test.get("output", "").splitlines()[-12:])
            complaints.append(f"{mode}: {name}: failed, but not at a RUN line with %expect_exit:"
                              f"\n{tail}")
    print(f"{mode}: {len(files) - len(complaints)} of {len(files)} error-path files fail "
          f"against a kiln that {describe(mode)} after its diagnostic")
    return complaints


def describe(mode):
    return {"crash": "segfaults", "exit0": "exits 0", "asan": "reads freed memory (ASan)",
            "ubsan": "overflows an int (UBSan)"}[mode]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lit", default=LIT_PY, help="lit.py (LLVM 14's by default)")
    parser.add_argument("--build", required=True, help="the build folder (BUILD/kiln, BUILD/tests/lit)")
    parser.add_argument("--work", required=True, help="a scratch folder")
    parser.add_argument("--modes", default="crash,exit0")
    parser.add_argument("--fault", help="kiln_sanitizer_fault, for the asan and ubsan modes")
    parser.add_argument("files", nargs="*", help="lit files, relative to tests/lit")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown or (not args.fault and {"asan", "ubsan"} & set(modes)):
        parser.error(f"modes are {', '.join(MODES)}; asan and ubsan need --fault")
    if args.fault:
        args.fault = os.path.abspath(args.fault)  # the wrapper runs in the tests' folders
        if not os.access(args.fault, os.X_OK):
            parser.error(f"--fault {args.fault}: not an executable")

    complaints = [f"{line}\n  (lit's `not` passes a crash: use %expect_exit CODE)"
                  for line in unguarded_runs()]
    all_files = error_path_files()
    files = args.files or all_files
    not_error_paths = sorted(set(files) - set(all_files))
    if not_error_paths:
        parser.error(f"not error-path lit files: {', '.join(not_error_paths)}")
    if not files:
        complaints.append("no error-path lit files found (RUN: %expect_exit N kiln ...)")
    for mode in modes:
        complaints += check_mode(mode, files, args)
    if complaints:
        print("\n".join(complaints))
        sys.exit(f"{len(complaints)} error-path check(s) can pass against a broken kiln")
    print(f"every error-path test fails against a broken kiln ({', '.join(modes)})")


if __name__ == "__main__":
    main()
