#!/usr/bin/env python3
"""Checks the include graph between kiln's layers against the architecture's order.

The layers, lowest first (a layer may include the ones below it, never one above):

    ir < ir/eval < passes < codegen < runtime < compiler

tests/, bench/, examples/ and tools/ sit on top and may include anything. Every edge between
layers is listed in ALLOWED with the reason it exists. An edge up the order, or one the
architecture's "must not" column forbids (ARCHITECTURE.md's layout table: the evaluator knows
no passes, codegen or runtimes; passes emit no source; codegen calls no NVRTC or driver; the
runtime does not re-optimize), fails with the files that make it. A new edge that the order
permits but ALLOWED does not list fails too: add it here with its reason, so this list stays
the map of who uses whom.

Usage: check_layering.py SOURCE_DIR      prints the graph, exits 1 on a violation
       check_layering.py --self-test     checks that the checker rejects bad edges
"""
import collections
import os
import re
import sys

LAYERS = ["ir", "ir/eval", "passes", "codegen", "runtime", "compiler"]
FREE = {"tests", "bench", "examples", "tools"}  # tests, demos, generators: may include any layer

# Every edge between layers in the code today, with the reason it is legitimate.
ALLOWED = {
    ("ir/eval", "ir"): "the evaluator runs IR graphs on ir::Tensor",
    ("passes", "ir"): "passes rewrite ir::Graph",
    ("passes", "ir/eval"): "constant-fold computes parameter-only nodes with the reference kernels",
    ("codegen", "ir"): "codegen emits CUDA from the planned ir::Graph and its MemoryPlan",
    ("runtime", "ir"): "tensors, dtypes and the graph of kernels the backends run",
    ("runtime", "codegen"): "the runtime compiles and runs codegen's Program (source, kernel table)",
    ("compiler", "ir"): "the frontends and importers build ir::Graph",
    ("compiler", "ir/eval"): "kiln run --backend=reference runs the evaluator",
    ("compiler", "passes"): "the pass pipeline driver (kiln opt, compile, train)",
    ("compiler", "codegen"): "kiln emit and compile generate the CUDA source",
    ("compiler", "runtime"): "kiln run, train and compile build executables and packages",
}

# Edges the order would permit but ARCHITECTURE.md's "must not" column forbids.
FORBIDDEN = {
    ("runtime", "passes"): "the runtime must not re-optimize the graph",
    ("codegen", "passes"): "codegen does not re-run passes: it reads a planned graph",
    ("runtime", "ir/eval"): "the backends are checked against the evaluator, not built on it",
    ("codegen", "ir/eval"): "codegen emits the op table's expressions, not the evaluator's loops",
}

# System headers a layer must not include (ARCHITECTURE.md: ir knows no JSON or CUDA; passes
# emit no source; codegen calls neither NVRTC nor the driver).
CUDA_HEADERS = r"(cuda|cuda_runtime|cuda_runtime_api|nvrtc|cudnn\w*|cublas\w*)\.h"
FORBIDDEN_SYSTEM = {
    "ir": [r"nlohmann/", CUDA_HEADERS],
    "ir/eval": [r"nlohmann/", CUDA_HEADERS],
    "passes": [r"nlohmann/", CUDA_HEADERS],
    "codegen": [CUDA_HEADERS, r"dlfcn\.h"],
}

SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc", ".def")
SKIP_DIRS = {".git", "build", "docs", "scripts", "tools"}
# Include directories besides the repository root (CMake's target_include_directories).
EXTRA_INCLUDE_DIRS = ["ir/public", "compiler/api/public"]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def node_of(path):
    """The layer (or free folder) a repository-relative path belongs to."""
    parts = path.split("/")
    if parts[0] == "ir" and len(parts) > 2 and parts[1] == "eval":
        return "ir/eval"
    return parts[0]


def resolve(root, including, target):
    """The repository-relative path an #include "target" names, or None (a system header)."""
    for base in ["", os.path.dirname(including)] + EXTRA_INCLUDE_DIRS:
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def scan(root):
    """(edges, system): edges[(from, to)] = [(file, line, include)], system[from] likewise."""
    edges = collections.defaultdict(list)
    system = collections.defaultdict(list)
    for directory, subdirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir == ".":
            # Build trees (build/, build-asan/, ...) hold generated files, not layers.
            subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS and not d.startswith(".")
                          and not os.path.exists(os.path.join(directory, d, "CMakeCache.txt"))]
        subdirs.sort()
        for name in sorted(files):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.normpath(os.path.join(rel_dir, name))
            if "/" not in path:
                continue  # files at the root belong to no layer
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for match in INCLUDE.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                quote, target = match.groups()
                resolved = resolve(root, path, target) if quote == '"' else None
                if resolved is None:
                    system[node_of(path)].append((path, line, target))
                elif node_of(resolved) != node_of(path):
                    edges[(node_of(path), node_of(resolved))].append((path, line, target))
    return edges, system


def violations(edges, system):
    """One message per edge or header that breaks the layering."""
    problems = []
    for (source, target), sites in sorted(edges.items()):
        where = "; ".join(f"{p}:{l} includes {t}" for p, l, t in sites[:3])
        if len(sites) > 3:
            where += f" (and {len(sites) - 3} more)"
        if source in FREE:
            continue
        if source not in LAYERS or target not in LAYERS + sorted(FREE):
            unknown = source if source not in LAYERS else target
            problems.append(f"{source} -> {target}: '{unknown}' is in no layer; add it to "
                            f"LAYERS or FREE in {os.path.basename(__file__)}: {where}")
        elif target in FREE:
            problems.append(f"{source} -> {target}: library code includes test or example "
                            f"code: {where}")
        elif LAYERS.index(target) > LAYERS.index(source):
            problems.append(f"{source} -> {target}: backward edge ({source} is below {target} in "
                            f"{' < '.join(LAYERS)}): {where}")
        elif (source, target) in FORBIDDEN:
            problems.append(f"{source} -> {target}: {FORBIDDEN[(source, target)]}: {where}")
        elif (source, target) not in ALLOWED:
            problems.append(f"{source} -> {target}: a new edge; if it is legitimate, add it to "
                            f"ALLOWED in {os.path.basename(__file__)} with its reason: {where}")
    for layer, patterns in sorted(FORBIDDEN_SYSTEM.items()):
        for path, line, target in system.get(layer, []):
            if any(re.match(p, target) for p in patterns):
                problems.append(f"{layer} must not include <{target}>: {path}:{line}")
    return problems


def print_graph(edges):
    graph = collections.defaultdict(dict)
    for (source, target), sites in edges.items():
        graph[source][target] = len(sites)
    order = LAYERS + sorted(FREE) + sorted(set(graph) - set(LAYERS) - FREE)
    print("include graph (folder -> folders it includes, with the number of #include lines):")
    for source in order:
        if source not in graph:
            continue
        targets = sorted(graph[source], key=lambda t: (t not in LAYERS, LAYERS.index(t)
                                                       if t in LAYERS else 0, t))
        print(f"  {source:9} -> " + ", ".join(f"{t} ({graph[source][t]})" for t in targets))


def self_test():
    """The checker must reject an edge up the order, a forbidden one and an unlisted one."""
    site = [("x", 1, "y")]
    good = {edge: site for edge in ALLOWED}
    assert violations(good, {}) == [], violations(good, {})
    for bad in [("ir", "passes"), ("ir/eval", "passes"), ("passes", "codegen"),
                ("codegen", "runtime"), ("runtime", "compiler"), ("runtime", "passes"),
                ("codegen", "passes"), ("ir", "tests"), ("newdir", "ir")]:
        found = violations({**good, bad: site}, {})
        assert len(found) == 1 and found[0].startswith(f"{bad[0]} -> {bad[1]}:"), (bad, found)
    assert violations(good, {"ir": [("ir/x.cpp", 3, "nlohmann/json.hpp")]})
    assert violations(good, {"codegen": [("codegen/x.cpp", 3, "nvrtc.h")]})
    assert not violations(good, {"runtime": [("runtime/x.cpp", 3, "nvrtc.h")]})
    assert node_of("ir/eval/interpreter.h") == "ir/eval" and node_of("ir/graph.h") == "ir"
    print("self-test passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    edges, system = scan(argv[1])
    print_graph(edges)
    problems = violations(edges, system)
    for problem in problems:
        print("error: " + problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} layering violation(s); the order is in "
              f"{os.path.basename(__file__)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
