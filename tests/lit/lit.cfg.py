# lit configuration for kiln's FileCheck tests. Run through ctest (label "lit"), or directly:
#   /usr/bin/python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv build/tests/lit
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.join(config.kiln_source_dir, "tests", "lit")
# --param exec_root=DIR and --param kiln_dir=DIR: tests/mutation/check_error_paths.py runs the
# error-path tests against a broken kiln (kiln_dir/kiln wraps the real one), in a folder of its
# own so that it never races the ordinary run.
config.test_exec_root = lit_config.params.get(
    "exec_root", os.path.join(config.kiln_binary_dir, "tests", "lit-out"))
kiln_dir = lit_config.params.get("kiln_dir", config.kiln_binary_dir)

config.substitutions.append(("%kiln", os.path.join(kiln_dir, "kiln")))
config.substitutions.append(("%examples", os.path.join(config.kiln_source_dir, "examples")))
config.substitutions.append(("%python", config.python))
config.substitutions.append(
    ("%expect_exit", config.python + " " + os.path.join(config.test_source_root, "Inputs", "expect_exit.py")))
config.environment["PATH"] = os.pathsep.join(
    [kiln_dir, os.path.dirname(config.filecheck), config.environment.get("PATH", "")])
# Keep the sanitizer settings of the sanitizer build, but never let a sanitizer exit 1, kiln's
# status for a user error: a use-after-free after an error message would pass as the expected
# failure. ASan exits 86 and UBSan 87 (whatever the caller set: these come last, and the last
# setting wins), and UBSan stops at its first report. Inputs/expect_exit.py never accepts them.
SANITIZER_EXITS = {"ASAN_OPTIONS": "exitcode=86", "UBSAN_OPTIONS": "halt_on_error=1:exitcode=87"}
for name, required in SANITIZER_EXITS.items():
    config.environment[name] = ":".join(filter(None, [os.environ.get(name, ""), required]))

# The sanitizer build (ASan + UBSan) runs kiln many times slower: tests of scale say
# `UNSUPPORTED: sanitizer`, live in scale/, and run in the normal build only (ctest lit_scale:
# CI runs the rest of the lit suite in the sanitizer build alone).
if config.kiln_sanitize.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("sanitizer")

# One kernel cache per build for the suite: lit passes no HOME, so kiln would otherwise use the
# user's ~/.cache/kiln (a warm one hides the compiles a fresh machine does, and tests should not
# write there). Per build, not per exec_root: the mutation runs (tests/mutation/) share it with
# the ordinary run. Tests that are about the cache set KILN_CACHE_DIR themselves.
config.environment["KILN_CACHE_DIR"] = os.path.join(config.kiln_binary_dir, "tests", "lit-kernel-cache")
