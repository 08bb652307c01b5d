# lit configuration for kiln's FileCheck tests. Run through ctest (label "lit"), or directly:
#   /usr/bin/python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv build/tests/lit
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.join(config.kiln_source_dir, "tests", "lit")
config.test_exec_root = os.path.join(config.kiln_binary_dir, "tests", "lit-out")

config.substitutions.append(("%kiln", os.path.join(config.kiln_binary_dir, "kiln")))
config.substitutions.append(("%examples", os.path.join(config.kiln_source_dir, "examples")))
config.substitutions.append(("%python", config.python))
config.substitutions.append(
    ("%expect_exit", config.python + " " + os.path.join(config.test_source_root, "Inputs", "expect_exit.py")))
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_binary_dir, os.path.dirname(config.filecheck), config.environment.get("PATH", "")])
# Keep sanitizer settings of the sanitizer build.
for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
