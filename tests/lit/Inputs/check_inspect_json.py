#!/usr/bin/python3
"""Reads `kiln inspect --format=json` from stdin and checks its schema (docs/inspect.md) and
that its figures agree with each other: totals are the sums over kernels, the memory figures
are ordered lower bound <= planned <= naive, a kernel's modeled time is max(compute at its
unit's peak times its efficiency, memory).
usage: check_inspect_json.py [--kernels N] [--before N] [--archs sm_80,sm_90]"""
import argparse
import json
import math
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--kernels", type=int)
parser.add_argument("--before", type=int)
parser.add_argument("--archs", default="sm_80,sm_90")
args = parser.parse_args()
report = json.load(sys.stdin)


def check(condition, message):
    if not condition:
        sys.exit(f"check_inspect_json: {message}")


def keys(obj, names, where):
    check(isinstance(obj, dict), f"{where} is not an object")
    missing = [name for name in names if name not in obj]
    check(not missing, f"{where} lacks {missing}")


def integer(value, where):
    check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
          f"{where} = {value!r} is not a non-negative integer")


keys(report, ["graph", "pipeline", "archs", "roofline", "kernels", "totals", "memory"], "report")
check(report["archs"] == args.archs.split(","), f"archs {report['archs']}")
roofline = report["roofline"]
keys(roofline, ["device", "dram_bytes_per_second", "flops_per_second"], "roofline")
check(roofline["dram_bytes_per_second"] == 3.35e12 and roofline["flops_per_second"] == 66.9e12,
      f"roofline constants {roofline}")

kernels = report["kernels"]
check(kernels, "no kernels")
defined = {}  # function -> the kernel that defines it
for kernel in kernels:
    where = f"kernel {kernel.get('name')}"
    # A kernel launches its own function or an earlier kernel's of identical code, whose ptxas
    # figures it shares.
    if kernel.get("function") == kernel.get("name"):
        defined[kernel["name"]] = kernel
    else:
        check(kernel.get("function") in defined, f"{where}: launches {kernel.get('function')}, undefined")
        check(kernel.get("resources") == defined[kernel["function"]].get("resources"),
              f"{where}: resources differ from those of {kernel['function']}")
    keys(kernel, ["name", "function", "implementation", "op_kind", "source_nodes", "grid", "block",
                  "dynamic_shared_bytes", "flops", "bytes_read", "bytes_written", "unfused_bytes",
                  "arithmetic_intensity", "modeled_seconds", "bound", "unit", "efficiency",
                  "two_four_weights", "sparse_modeled_seconds", "layout_transform_seconds", "resources"], where)
    check(kernel["implementation"]["kind"] in ("generated", "library"), f"{where}: implementation")
    # The host backend runs GEMMs' host bodies as loop nests, cooperating kernels on fibers.
    check(kernel.get("host_execution") in ("loop nest", "plain loop", "fibers"),
          f"{where}: host_execution {kernel.get('host_execution')!r}")
    check(kernel["source_nodes"], f"{where}: no source nodes")
    for node in kernel["source_nodes"]:
        keys(node, ["name", "op"], f"{where} source node")
    for field in ("flops", "bytes_read", "bytes_written", "unfused_bytes", "dynamic_shared_bytes"):
        integer(kernel[field], f"{where}.{field}")
    check(len(kernel["grid"]) == 3 and len(kernel["block"]) == 3, f"{where}: grid/block")
    bytes_moved = kernel["bytes_read"] + kernel["bytes_written"]
    check(kernel["unfused_bytes"] >= bytes_moved, f"{where}: fusion cannot add traffic")
    check(0 < kernel["efficiency"] <= 1, f"{where}: efficiency {kernel['efficiency']}")
    peaks = {"f32 FMA": "flops_per_second", "TF32 tensor-core": "tf32_flops_per_second",
             "bf16 tensor-core": "half_flops_per_second", "f16 tensor-core": "half_flops_per_second"}
    # Sparse tensor cores (a 2:4 weight kept compressed, mma.sp) multiply at twice the dense rate.
    unit = kernel["unit"]
    on_sparse_units = unit in ("bf16 sparse tensor-core", "f16 sparse tensor-core")
    if on_sparse_units:
        unit = unit.replace(" sparse", "")
    check(unit in peaks, f"{where}: unit {kernel['unit']}")
    peak = roofline[peaks[unit]] * (2 if on_sparse_units else 1)
    check(0 < kernel["bandwidth_share"] <= 1, f"{where}: bandwidth share {kernel['bandwidth_share']}")
    blocks = kernel["grid"][0] * kernel["grid"][1] * kernel["grid"][2]
    implementation = kernel["implementation"]
    if implementation["kind"] == "generated":
        # GEMMs: their share of the SMs; streaming kernels: their resident threads against
        # 1,024 per SM (cost_model.h, kStreamThreadsPerSm).
        if implementation["gemm"]:
            share = min(1, blocks / 132)
        else:
            resources = kernel["resources"]
            arch = resources.get("sm_90") or next(iter(resources.values()), {})
            per_sm = max(1, arch.get("active_blocks_per_sm", 1))
            threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
            share = min(1, min(blocks, 132 * per_sm) * threads / (132 * 1024))
        check(math.isclose(kernel["bandwidth_share"], share, rel_tol=1e-12),
              f"{where}: bandwidth share of {blocks} blocks")
    # A cuDNN convolution on tensor cores may transform NCHW operands to NHWC and the result back:
    # at most each byte it moves twice more, at the DRAM peak, reported beside its time
    # (cost_model.h, kNchwTransforms). NHWC operands (layout-nhwc; " nhwc" in the call) need none.
    cudnn_tensor_core_conv = (implementation["kind"] == "library" and implementation["library"] == "cudnn"
                              and kernel["unit"] != "f32 FMA" and " nhwc" not in implementation["descriptor"])
    transforms = 2 * bytes_moved / roofline["dram_bytes_per_second"] if cudnn_tensor_core_conv else 0
    check(math.isclose(kernel["layout_transform_seconds"], transforms, rel_tol=1e-9, abs_tol=0),
          f"{where}: layout transforms {kernel['layout_transform_seconds']}, expected {transforms}")
    seconds = max(kernel["flops"] / (peak * kernel["efficiency"]),
                  bytes_moved / (roofline["dram_bytes_per_second"] * kernel["bandwidth_share"]))
    check(math.isclose(kernel["modeled_seconds"], seconds, rel_tol=1e-9), f"{where}: modeled time")
    # 2:4 weights: the math at twice the unit's rate (sparse tensor cores); FMA units have none.
    sparse = kernel["sparse_modeled_seconds"]
    if not kernel["two_four_weights"] or kernel["unit"] == "f32 FMA":
        check(sparse is None, f"{where}: a sparse time without 2:4 weights on tensor cores")
    elif on_sparse_units:
        check(sparse == kernel["modeled_seconds"], f"{where}: on sparse tensor cores already, {sparse}")
    else:
        expected = max(kernel["flops"] / (2 * peak * kernel["efficiency"]),
                       bytes_moved / (roofline["dram_bytes_per_second"] * kernel["bandwidth_share"]))
        check(math.isclose(sparse, expected, rel_tol=1e-9) and sparse <= kernel["modeled_seconds"],
              f"{where}: sparse modeled time {sparse}, expected {expected}")
    check(kernel["bound"] in ("memory", "compute"), f"{where}: bound")
    for arch in report["archs"]:
        resources = kernel["resources"][arch]
        keys(resources, ["registers", "spill_bytes", "shared_bytes", "occupancy", "limiter"],
             f"{where} on {arch}")
        check(resources["spill_bytes"] == 0, f"{where} spills on {arch}")
        check(0 < resources["occupancy"] <= 1, f"{where}: occupancy on {arch}")

totals = report["totals"]
keys(totals, ["kernels", "kernels_before_fusion", "flops", "dram_bytes",
              "dram_bytes_before_fusion", "modeled_seconds"], "totals")
check(totals["kernels"] == len(kernels), "totals.kernels")
for execution in ("loop nest", "plain loop", "fibers"):
    field = "host_" + {"loop nest": "loop_nests", "plain loop": "plain_loops", "fibers": "fibers"}[execution]
    check(totals.get(field) == sum(k["host_execution"] == execution for k in kernels), f"totals.{field}")
check(totals["kernels_before_fusion"] == sum(len(k["source_nodes"]) for k in kernels),
      "totals.kernels_before_fusion")
check(totals["flops"] == sum(k["flops"] for k in kernels), "totals.flops")
check(totals["two_four_kernels"] == sum(bool(k["two_four_weights"]) for k in kernels), "totals.two_four_kernels")
check(math.isclose(totals["sparse_modeled_seconds"],
                   sum(k["sparse_modeled_seconds"] or k["modeled_seconds"] for k in kernels), rel_tol=1e-9),
      "totals.sparse_modeled_seconds")
check(math.isclose(totals["layout_transform_seconds"], sum(k["layout_transform_seconds"] for k in kernels),
                   rel_tol=1e-9), "totals.layout_transform_seconds")
check(totals["dram_bytes"] == sum(k["bytes_read"] + k["bytes_written"] for k in kernels),
      "totals.dram_bytes")
check(totals["dram_bytes_before_fusion"] == sum(k["unfused_bytes"] for k in kernels),
      "totals.dram_bytes_before_fusion")
if args.kernels is not None:
    check(totals["kernels"] == args.kernels, f"{totals['kernels']} kernels, expected {args.kernels}")
if args.before is not None:
    check(totals["kernels_before_fusion"] == args.before,
          f"{totals['kernels_before_fusion']} kernels before fusion, expected {args.before}")

memory = report["memory"]
keys(memory, ["planned", "naive_bytes", "planned_bytes", "lower_bound_bytes",
              "ratio_to_lower_bound"], "memory")
for field in ("naive_bytes", "planned_bytes", "lower_bound_bytes"):
    integer(memory[field], f"memory.{field}")
check(memory["lower_bound_bytes"] <= memory["planned_bytes"] <= memory["naive_bytes"],
      f"memory figures out of order: {memory}")
check(math.isclose(memory["ratio_to_lower_bound"],
                   memory["planned_bytes"] / memory["lower_bound_bytes"]), "ratio_to_lower_bound")
print(f"{len(kernels)} kernels, {totals['kernels_before_fusion']} before fusion: schema ok")
