// Kernel emitters for reduce_sum, reduce_mean and reduce_max over any axes (keepdims only
// changes the result's shape, not its row-major order), and for pairwise_sum (at the end).
//
// The input is split into kept dims (one output element each) and reduced dims, each list
// collapsed (see StridedDims): element (o, r) sits at kept_offset(o) + reduced_offset(r).
//   - rows: when the innermost input dim is reduced and a row has at least kWarpSize
//     elements, one warp per output (rows up to kMaxWarpRow) or one block per output reads
//     the row with consecutive lanes on consecutive elements, then combines with shuffles
//     (and shared memory across warps);
//   - columns: otherwise consecutive threads take consecutive outputs, so their reads are
//     consecutive too; long columns are split over kSlices threads (blockDim.y) whose partial
//     results meet in shared memory.
// Accumulation: float for f32, f16 and bf16 (see reduce_util.h for the order and tolerance),
// double for f64, 64-bit for i32 sums (saturated to i32 at the end, as the reference's store), i64 sums wrap past
// 2^63 where the reference saturates.
#include <bit>

#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;

// Columns strategy: partial results per output when a column has at least this many elements.
constexpr int64_t kSlices = 8;
constexpr int64_t kMinSlicedColumn = 64;

struct Accumulator {
  std::string type;  // C type of the running value
  std::string init;
  Combine combine = Combine::Sum;
  std::string finish;  // expression of `acc` in the result's compute type
  std::string comment;
};

Accumulator accumulator_for(ir::OpId op, DType dtype) {
  if (dtype == DType::F64) {
    if (op == ir::OpId::ReduceMax)
      return {"double", "-INFINITY", Combine::Max, "acc", "max in double; NaN propagates"};
    const std::string finish = op == ir::OpId::ReduceMean ? "acc / kReducedCount" : "acc";
    return {"double", "0.0", Combine::Sum, finish, "sum in double"};
  }
  if (op == ir::OpId::ReduceMax) {
    if (ir::is_floating(dtype))
      return {"float", "-INFINITY", Combine::Max, "acc", "max in float; NaN propagates (kiln_max)"};
    const std::string type(compute_type(dtype));
    const std::string lowest =
        dtype == DType::I64 ? "-9223372036854775807LL - 1" : "-2147483647 - 1";
    return {type, lowest, Combine::Max, "acc", "max in " + type};
  }
  if (ir::is_floating(dtype)) {
    const std::string finish = op == ir::OpId::ReduceMean ? "acc / kReducedCount" : "acc";
    return {"float", "0.0f", Combine::Sum, finish, "sum in float"};
  }
  if (dtype == DType::I32)
    return {"long long", "0", Combine::Sum,
            "static_cast<int>(acc < kI32Min ? kI32Min : (acc > kI32Max ? kI32Max : acc))",
            "sum in 64 bits, saturated to i32 at the end"};
  return {"long long", "0", Combine::Sum, "acc", "sum in 64 bits (wraps past 2^63)"};
}

std::string fold(const Accumulator& acc, const std::string& value) {
  if (acc.combine == Combine::Sum) return "acc += " + value + ";";
  if (acc.type == "float") return "acc = kiln_max(acc, " + value + ");";
  if (acc.type == "double") {  // kiln_max's test, inline: NaN propagates
    return "{ const double v = " + value + "; acc = (acc != acc || acc > v) ? acc : v; }";
  }
  return "acc = " + value + " > acc ? " + value + " : acc;";
}

struct ReducePlan {
  StridedDims kept;
  StridedDims reduced;
  int64_t outputs = 1;
  int64_t per_output = 1;  // reduced elements per output
  int64_t count = 1;       // input elements
};

ReducePlan plan_reduction(const ir::Node& node) {
  const ir::Shape& shape = node.inputs[0]->type.shape;
  const int rank = static_cast<int>(shape.size());
  const auto& axes = attr<std::vector<int64_t>>(node, "axes");
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t axis : axes) reduced[axis < 0 ? axis + rank : axis] = true;
  const std::vector<int64_t> strides = ir::row_major_strides(shape);
  ReducePlan plan;
  for (int d = 0; d < rank; ++d) {
    StridedDims& part = reduced[d] ? plan.reduced : plan.kept;
    part.dims.push_back(shape[d]);
    part.strides.push_back(strides[d]);
  }
  plan.kept = collapse(plan.kept);
  plan.reduced = collapse(plan.reduced);
  plan.outputs = ir::num_elements(plan.kept.dims);
  plan.per_output = ir::num_elements(plan.reduced.dims);
  plan.count = ir::num_elements(shape);
  return plan;
}

void emit_common_constants(BodyWriter& w, const ReducePlan& plan, const Accumulator& acc,
                           const std::string& type) {
  w.line("constexpr {} kOutputs = {};", type, int_literal(plan.outputs, type));
  w.line("constexpr {} kReduced = {};", type, int_literal(plan.per_output, type));
  if (acc.finish.find("kReducedCount") != std::string::npos)
    w.line("constexpr {} kReducedCount = {};", acc.type,
           acc.type == "double" ? fmt::format("{}.0", plan.per_output)
                                : literal(DType::F32, double(plan.per_output)));
  if (acc.finish.find("kI32Min") != std::string::npos) {
    w.line("constexpr long long kI32Min = -2147483647LL - 1;");
    w.line("constexpr long long kI32Max = 2147483647LL;");
  }
  w.comment("Output element o reads x[kept offset of o + reduced offset of r], r < kReduced.");
  emit_strided_constants(w, "Kept", plan.kept, type);
  emit_strided_constants(w, "Reduced", plan.reduced, type);
}

// acc folds the elements r = first, first + step, ... of the output at `base`.
void emit_fold_loop(BodyWriter& w, const KernelRequest& request, const ReducePlan& plan,
                    const Accumulator& acc, const std::string& type, const std::string& first,
                    const std::string& step) {
  w.line("{} acc = {};", acc.type, acc.init);
  w.open("for ({} r = {}; r < kReduced; r += {})", type, first, step);
  emit_strided_offset(w, "offset", "r", "Reduced", plan.reduced, type);
  w.line(fold(acc, load_input(request, 0, "base + offset")));
  w.close();
}

std::string store_result(const KernelRequest& request, const Accumulator& acc,
                         const std::string& index) {
  return fmt::format("{}[{}] = {};", request.output_params[0], index,
                     store(request.node.results[0]->type.dtype, acc.finish));
}

// The host backend's body of a rows reduction (docs/codegen.md, "The host backend"): thread 0
// computes the block's rows without shuffles or barriers. Each CUDA thread's strided fold runs
// lane by lane (for each r0, the kHostThreads elements r0 + lane: every lane still folds its
// own elements in order), then the same combining tree, so the results are the CUDA body's bit
// for bit. On fibers, the shuffles and barriers cost more than the sums.
void emit_rows_host_body(BodyWriter& w, const KernelRequest& request, const ReducePlan& plan,
                         const Accumulator& acc, const std::string& type, bool per_warp) {
  open_host_rows(w, per_warp, type, "kOutputs", "reduce.cpp");
  emit_strided_offset(w, "base", "row", "Kept", plan.kept, type);
  w.line("{} folds[kHostThreads];", acc.type);
  w.line("for (int host_lane = 0; host_lane < kHostThreads; ++host_lane) folds[host_lane] = {};", acc.init);
  w.open("for ({0} r0 = 0; r0 < kReduced; r0 += kHostThreads)", type);
  w.open("for (int host_lane = 0; host_lane < kHostThreads && r0 + host_lane < kReduced; ++host_lane)");
  w.line("const {} r = r0 + host_lane;", type);
  emit_strided_offset(w, "offset", "r", "Reduced", plan.reduced, type);
  w.line("{}& acc = folds[host_lane];", acc.type);
  w.line(fold(acc, load_input(request, 0, "base + offset")));
  w.close();
  w.close();
  emit_host_threads_combine(w, "acc", "folds", "kHostThreads", acc.combine, acc.type);
  w.line(store_result(request, acc, "row"));
  close_host_rows(w, per_warp);
}

KernelSpec emit_rows(const KernelRequest& request, const ReducePlan& plan, const Accumulator& acc) {
  const std::string type = index_type(plan.count);
  const bool per_warp = plan.per_output <= kMaxWarpRow;
  BodyWriter w;
  w.comment(acc.comment + (per_warp ? "; one warp per output" : "; one block per output"));
  emit_common_constants(w, plan, acc, type);
  emit_warp_constants(w, kRowBlock);
  if (!per_warp) w.line("{}* partial = reinterpret_cast<{}*>(kiln_smem);", acc.type, acc.type);
  emit_rows_host_body(w, request, plan, acc, type, per_warp);
  open_row_loop(w, per_warp, type, "kOutputs");
  emit_strided_offset(w, "base", "row", "Kept", plan.kept, type);
  emit_fold_loop(w, request, plan, acc, type, per_warp ? "lane" : "threadIdx.x",
                 per_warp ? "kWarpSize" : "blockDim.x");
  if (per_warp)
    emit_warp_combine(w, "acc", acc.combine, acc.type);
  else
    emit_block_combine(w, "acc", acc.combine, acc.type, "partial");
  w.open(per_warp ? "if (lane == 0)" : "if (threadIdx.x == 0)");
  w.line(store_result(request, acc, "row"));
  w.close();
  w.close();

  KernelSpec spec;
  spec.block = Dim3{static_cast<uint32_t>(kRowBlock), 1, 1};
  const int64_t rows_per_block = per_warp ? kRowBlock / kWarpSize : 1;
  spec.grid = Dim3{grid_stride_blocks(plan.outputs, static_cast<uint32_t>(rows_per_block)), 1, 1};
  spec.shared_bytes = per_warp ? 0 : static_cast<uint32_t>(kRowBlock / kWarpSize * 8);
  spec.uses_barriers = true;
  spec.host_variant = true;
  spec.body = w.take();
  spec.note = per_warp ? "one warp per output row, strided loads, shuffle tree"
                       : "one block per output row, strided loads, shuffle + shared-memory tree";
  return spec;
}

// The host backend's body of a sliced columns reduction: thread (0, 0) computes each pass's
// kColumns x kSlices partial results, slice by slice with the columns innermost (consecutive
// in memory), each still folding its elements in order, then each column's partials in slice
// order, as the CUDA body does: bit for bit its results, without the barriers.
void emit_columns_host_body(BodyWriter& w, const KernelRequest& request, const ReducePlan& plan,
                            const Accumulator& acc, const std::string& type) {
  open_host_body(w, {"Host backend: each pass as loops without barriers, equal bit for bit to the CUDA",
                     "body below (codegen/kernels/reduce.cpp). Thread (0, 0) runs it."},
                 "threadIdx.x != 0 || threadIdx.y != 0");
  w.open("for ({0} first = static_cast<{0}>(blockIdx.x) * kColumns; first < kOutputs; "
         "first += kColumns * gridDim.x)", type);
  w.line("const int columns = kOutputs - first < kColumns ? static_cast<int>(kOutputs - first) : kColumns;");
  w.line("{} partials[kSlices][kColumns];", acc.type);
  w.open("for (int host_slice = 0; host_slice < kSlices; ++host_slice)");
  w.line("for (int host_column = 0; host_column < columns; ++host_column) "
         "partials[host_slice][host_column] = {};", acc.init);
  w.open("for ({} r = host_slice; r < kReduced; r += kSlices)", type);
  emit_strided_offset(w, "offset", "r", "Reduced", plan.reduced, type);
  w.open("for (int host_column = 0; host_column < columns; ++host_column)");
  w.line("const {} o = first + host_column;", type);
  emit_strided_offset(w, "base", "o", "Kept", plan.kept, type);
  w.line("{}& acc = partials[host_slice][host_column];", acc.type);
  w.line(fold(acc, load_input(request, 0, "base + offset")));
  w.close();
  w.close();
  w.close();
  w.open("for (int host_column = 0; host_column < columns; ++host_column)");
  w.line("const {} o = first + host_column;", type);
  w.line("{} acc = partials[0][host_column];", acc.type);
  w.open("for (int s = 1; s < kSlices; ++s)");
  w.line(fold(acc, "partials[s][host_column]"));
  w.close();
  w.line(store_result(request, acc, "o"));
  w.close();
  w.close();
  close_host_body(w);
}

KernelSpec emit_columns(const KernelRequest& request, const ReducePlan& plan,
                        const Accumulator& acc) {
  const std::string type = index_type(plan.count);
  const int64_t slices = plan.per_output >= kMinSlicedColumn ? kSlices : 1;
  const int64_t columns = kRowBlock / slices;
  BodyWriter w;
  w.comment(acc.comment + "; consecutive threads take consecutive outputs (coalesced reads)");
  emit_common_constants(w, plan, acc, type);
  if (slices == 1) {
    open_grid_stride_loop(w, "o", type, "kOutputs");
    emit_strided_offset(w, "base", "o", "Kept", plan.kept, type);
    emit_fold_loop(w, request, plan, acc, type, int_literal(0, type), "1");
    w.line(store_result(request, acc, "o"));
    w.close();
  } else {
    w.line("constexpr int kColumns = {};  // blockDim.x: outputs per block and pass", columns);
    w.line("constexpr int kSlices = {};  // blockDim.y: threads splitting one column", slices);
    w.line("{}* partial = reinterpret_cast<{}*>(kiln_smem);  // [kSlices][kColumns]", acc.type,
           acc.type);
    emit_columns_host_body(w, request, plan, acc, type);
    w.comment("Block-uniform loop: every thread reaches every barrier, in range or not.");
    w.open(
        "for ({} first = static_cast<{}>(blockIdx.x) * kColumns; first < kOutputs; "
        "first += kColumns * gridDim.x)",
        type, type);
    w.line("const {} o = first + threadIdx.x;", type);
    w.line("{} acc = {};", acc.type, acc.init);
    w.comment("Past the last output a thread folds nothing and contributes the identity.");
    w.open("if (o < kOutputs)");
    emit_strided_offset(w, "base", "o", "Kept", plan.kept, type);
    w.open("for ({} r = threadIdx.y; r < kReduced; r += kSlices)", type);
    emit_strided_offset(w, "offset", "r", "Reduced", plan.reduced, type);
    w.line(fold(acc, load_input(request, 0, "base + offset")));
    w.close();
    w.close();
    w.line("partial[threadIdx.y * kColumns + threadIdx.x] = acc;");
    w.line("__syncthreads();");
    w.open("if (threadIdx.y == 0 && o < kOutputs)");
    w.comment("Fold the kSlices partials of this column in slice order.");
    w.open("for (int s = 1; s < kSlices; ++s)");
    w.line(fold(acc, "partial[s * kColumns + threadIdx.x]"));
    w.close();
    w.line(store_result(request, acc, "o"));
    w.close();
    w.comment("Wait until the partials are read before the next pass overwrites them.");
    w.line("__syncthreads();");
    w.close();
  }
  KernelSpec spec;
  spec.block = Dim3{static_cast<uint32_t>(columns), static_cast<uint32_t>(slices), 1};
  spec.grid = Dim3{grid_stride_blocks(plan.outputs, static_cast<uint32_t>(columns)), 1, 1};
  spec.shared_bytes = slices == 1 ? 0 : static_cast<uint32_t>(kRowBlock * 8);
  spec.uses_barriers = slices > 1;
  spec.host_variant = slices > 1;
  spec.body = w.take();
  spec.note = slices == 1 ? "one thread per output, sequential fold, coalesced across threads"
                          : "32 outputs x 8 slices per block, partials combined in shared memory";
  return spec;
}

KernelSpec emit_reduce(const KernelRequest& request) {
  const ReducePlan plan = plan_reduction(request.node);
  const Accumulator acc = accumulator_for(request.node.op, request.node.inputs[0]->type.dtype);
  const bool inner_reduced = !plan.reduced.dims.empty() && plan.reduced.strides.back() == 1;
  if (inner_reduced && plan.per_output >= kWarpSize) return emit_rows(request, plan, acc);
  return emit_columns(request, plan, acc);
}

// pairwise_sum: one thread per column (consecutive threads on consecutive columns: coalesced
// reads), its rows added in ir/pairwise_sum.h's order, which the reference evaluator and the
// communicator's mean over ranks share. The level loop is unrolled, so every level[l] has a
// constant index and stays in a register (no stack frame; ptxas reports it).
KernelSpec emit_pairwise_sum(const KernelRequest& request) {
  const ir::Shape& shape = request.node.inputs[0]->type.shape;
  const int64_t rows = shape[0];
  const int64_t columns = ir::num_elements(ir::Shape(shape.begin() + 1, shape.end()));
  const DType dtype = request.node.inputs[0]->type.dtype;
  const std::string acc = dtype == DType::F64 ? "double" : "float";
  const std::string type = index_type(std::max<int64_t>(rows, 1) * columns);
  const int levels = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(rows))));
  BodyWriter w;
  w.comment(fmt::format("Sum in {} of each column's rows in a fixed pairwise tree (ir/pairwise_sum.h):", acc));
  w.comment("row r joins as a block of one, then merges with each finished block of its size on");
  w.comment("its left; the blocks left at the end are added largest first.");
  w.line("constexpr {} kColumns = {};", type, int_literal(columns, type));
  w.line("constexpr {} kRows = {};", type, int_literal(rows, type));
  w.line("constexpr int kLevels = {};  // bits of kRows", levels);
  open_grid_stride_loop(w, "c", type, "kColumns");
  if (rows == 0) {
    w.line("{}[c] = {};", request.output_params[0], store(dtype, acc == "double" ? "0.0" : "0.0f"));
  } else {
    w.line("{} level[kLevels];  // level[l]: a finished block of 2^l rows, waiting for its right neighbour", acc);
    w.open("for ({} r = 0; r < kRows; ++r)", type);
    w.line("{} carry = {};", acc, load_input(request, 0, "r * kColumns + c"));
    w.comment("One merge per trailing 1 bit of r; r < kRows < 2^kLevels has a 0 bit below kLevels.");
    w.line("#pragma unroll");
    w.open("for (int l = 0; l < kLevels; ++l)");
    w.open("if (((r >> l) & 1) == 0)");
    w.line("level[l] = carry;");
    w.line("break;");
    w.close();
    w.line("carry = level[l] + carry;");
    w.close();
    w.close();
    w.comment("kRows = " + std::to_string(rows) + ": one block per set bit, added left to right.");
    bool first = true;
    for (int l = levels - 1; l >= 0; --l) {
      if (((rows >> l) & 1) == 0) continue;
      w.line(first ? fmt::format("{} sum = level[{}];", acc, l) : fmt::format("sum = sum + level[{}];", l));
      first = false;
    }
    w.line("{}[c] = {};", request.output_params[0], store(dtype, "sum"));
  }
  w.close();
  KernelSpec spec = grid_stride_spec(columns);
  spec.body = w.take();
  spec.note = "one thread per column, rows added in a fixed pairwise tree";
  return spec;
}

}  // namespace

void add_reduce_emitters(EmitterTable& table) {
  for (const ir::OpId op : {ir::OpId::ReduceSum, ir::OpId::ReduceMean, ir::OpId::ReduceMax})
    table.emplace_back(op, emit_reduce);
  table.emplace_back(ir::OpId::PairwiseSum, emit_pairwise_sum);
  add_normalize_emitters(table);
  add_loss_emitters(table);
}

}  // namespace kiln::codegen
