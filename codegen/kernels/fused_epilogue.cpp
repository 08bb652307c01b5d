// The epilogue kind of fused kernels (ir/kernel_region.h): a conv2d/dense/matmul on the GEMM
// template (gemm.h) whose body's elementwise ops run on each accumulator before its store, with
// the casts of its operands applied as it loads them and a norm's rows normalized as they are
// staged (codegen/kernels/fused.cpp describes the kinds).
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "codegen/kernels/elementwise_util.h"
#include "codegen/kernels/fused_body.h"
#include "codegen/kernels/gemm.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "ir/strided_view.h"

namespace kiln::codegen::fused {
namespace {

// How an epilogue operand is indexed at one GEMM result: the result's channel (a bias), the
// result's own position (a residual) or element 0 (a scalar).
std::string epilogue_index(const ir::Node& node, const ir::Value* operand,
                           const ir::Shape& out) {
  if (node.op == ir::OpId::BiasAdd) return "channel";
  const ir::Shape& shape = operand->type.shape;
  if (shape == out) return "out_index";
  if (ir::num_elements(shape) == 1) return "0";
  return "channel";  // fuse-conv-bias-relu checked that it is per output channel
}

// The position of row `row` of A in its kernel operand: `row * kK`, or through the views the
// GEMM reads its rows by (fuse-gemm-views).
using RowPosition = std::function<std::string(const std::string& row)>;

std::string row_major(const std::string& row) { return "(" + row + ") * kK"; }

bool is_norm(const ir::Node& node) {
  return node.op == ir::OpId::LayerNorm || node.op == ir::OpId::RmsNorm;
}

bool is_gemm(const ir::Node& node) {
  return node.op == ir::OpId::Conv2d || node.op == ir::OpId::Dense || node.op == ir::OpId::Matmul;
}

// `float var` = the sum of `value` (an expression of k), or of its square, over the row's
// elements k = stat_part, stat_part + kStatThreads, ... below `length`: one statistics
// thread's share, as both GEMM bodies fold it.
void emit_stat_fold(BodyWriter& w, const std::string& var, const std::string& value, bool squared,
                    const std::string& length) {
  w.line("float {} = 0.0f;", var);
  w.open("if (stat_inside)");
  w.open("for (index_t k = stat_part; k < {}; k += kStatThreads)", length);
  w.line("const float value = {};", value);
  w.line("{} += {};", var, squared ? "value * value" : "value");
  w.close();
  w.close();
}

// add_row_statistics for the GEMM's host body (GemmOperand::host_setup): each row's
// kStatThreads CUDA threads' sums, then their shuffle steps over all of them, in the same
// order, so `<prefix>_mean` and `<prefix>_rstd` (arrays of the host body here) hold the CUDA
// body's values bit for bit.
std::string host_row_statistics(const ir::Node& norm, const std::string& prefix,
                                const std::string& element, const std::string& length,
                                double epsilon) {
  BodyWriter w(0);
  w.comment(fmt::format("The row statistics of {}, as the CUDA threads compute them.", norm.describe()));
  w.line("float {0}_mean[kTileM], {0}_rstd[kTileM];", prefix);
  w.open("for (int stat_row = 0; stat_row < kTileM; ++stat_row)");
  w.line("constexpr int kStatThreads = kThreads / kTileM;");
  w.line("const index_t stat_global_row = block_row + stat_row;");
  w.line("const bool stat_inside = stat_global_row < kM;");
  // `float var` = lane 0's sum of `value` (or its square) after the shuffle steps.
  const auto row_sum = [&](const std::string& var, const std::string& value, bool squared) {
    w.line("float {}_parts[kStatThreads];", var);
    w.open("for (int stat_part = 0; stat_part < kStatThreads; ++stat_part)");
    emit_stat_fold(w, var, value, squared, length);
    w.line("{0}_parts[stat_part] = {0};", var);
    w.close();
    w.open("for (int step = 1; step < kStatThreads; step <<= 1)");
    w.line("float next[kStatThreads];");
    w.line("for (int stat_part = 0; stat_part < kStatThreads; ++stat_part) "
           "next[stat_part] = {0}_parts[stat_part] + {0}_parts[stat_part ^ step];", var);
    w.line("for (int stat_part = 0; stat_part < kStatThreads; ++stat_part) "
           "{0}_parts[stat_part] = next[stat_part];", var);
    w.close();
    w.line("const float {0} = {0}_parts[0];", var);
  };
  if (norm.op == ir::OpId::RmsNorm) {
    w.line("const float stat_mean = 0.0f;");
  } else {
    row_sum("stat_sum", element, false);
    w.line("const float stat_mean = stat_sum / static_cast<float>({});", length);
  }
  row_sum("stat_squares", element + " - stat_mean", true);
  w.line("{}_mean[stat_row] = stat_mean;", prefix);
  w.line("{}_rstd[stat_row] = 1.0f / sqrtf(stat_squares / static_cast<float>({}) + {});", prefix,
         length, literal(ir::DType::F32, epsilon));
  w.close();
  return w.take();
}

// Row statistics of a layer_norm or rms_norm the GEMM recomputes (a prologue norm, or a norm
// its epilogue reads as the residual): before the K loop the block computes the mean and
// 1/rms of its kTileM rows of the norm's input, kThreads / kTileM neighbouring threads per row
// (4 with 64-row tiles, 2 with 128; shuffle steps combine them), two passes as the layer_norm
// kernel (the mean, then centred squares), into `<prefix>_mean` and `<prefix>_rstd` (kTileM
// floats each: arrays `first_array` and the next of extra_smem). `row_at` gives a row's
// position in the input, `length` the constant that is the normalized axis's size. Every
// thread reaches the shuffles and the barrier: rows past kM sum nothing.
void add_row_statistics(nn::GemmSpec& spec, const ir::Node& norm, const Names& names,
                        const std::string& prefix, uint32_t first_array, const RowPosition& row_at,
                        const std::string& length, const std::string& role) {
  const bool rms = norm.op == ir::OpId::RmsNorm;
  const std::string x = names.param(norm.inputs[0]);
  KILN_CHECK(!x.empty() && !names.param(norm.inputs[1]).empty() &&
             (rms || !names.param(norm.inputs[2]).empty()))
      << norm.describe() << ": a recomputed norm reads kernel operands only";
  const double epsilon = std::get<double>(norm.attrs.at("epsilon"));
  BodyWriter w(0);
  w.comment(fmt::format("{}: {} {}. kStatThreads threads per row of the", role, norm.describe(),
                        role == "Prologue" ? "normalizes the rows of A"
                                           : "is recomputed for the residual the epilogue adds"));
  w.comment("block sum their share of it; the mean and 1/rms of each row go to shared memory.");
  w.line("float* {}_mean = extra_smem + {} * kTileM;  // [kTileM]", prefix, first_array);
  w.line("float* {0}_rstd = {0}_mean + kTileM;  // [kTileM]", prefix);
  w.open("");
  w.line("constexpr int kStatThreads = kThreads / kTileM;");
  w.line("const int stat_row = threadIdx.x / kStatThreads;");
  w.line("const int stat_part = threadIdx.x % kStatThreads;");
  w.line("const index_t stat_global_row = block_row + stat_row;");
  w.line("const bool stat_inside = stat_global_row < kM;");
  const std::string element = x + "[" + row_at("stat_global_row") + " + k]";
  // `float var` = the sum over the row of `value` (an expression of k), or of its square; the
  // row's threads combined.
  const auto row_sum = [&](const std::string& var, const std::string& value, bool squared) {
    emit_stat_fold(w, var, value, squared, length);
    w.line("#pragma unroll");
    w.line("for (int step = 1; step < kStatThreads; step <<= 1)");
    w.line("  {0} += __shfl_xor_sync(0xffffffffu, {0}, step);", var);
  };
  if (rms) {
    w.line("const float stat_mean = 0.0f;  // rms_norm does not centre");
  } else {
    row_sum("stat_sum", element, false);
    w.line("const float stat_mean = stat_sum / static_cast<float>({});", length);
  }
  w.comment("Centred squares, as the layer_norm kernel sums them (no cancellation).");
  row_sum("stat_squares", element + " - stat_mean", true);
  w.open("if (stat_part == 0)");
  w.line("{}_mean[stat_row] = stat_mean;", prefix);
  w.line("{}_rstd[stat_row] = 1.0f / sqrtf(stat_squares / static_cast<float>({}) + {});", prefix,
         length, literal(ir::DType::F32, epsilon));
  w.close();
  w.line("__syncthreads();  // every row's statistics are in before the first tile");
  w.close();
  spec.a.setup += w.take();
  spec.a.host_setup += host_row_statistics(norm, prefix, element, length, epsilon);
  spec.row_stat_arrays = std::max(spec.row_stat_arrays, first_array + 2);
}

// `norm` applied to element (position, index k) of its input, with the statistics of
// add_row_statistics for the block's row `row`.
std::string normalized(const ir::Node& norm, const Names& names, const std::string& prefix,
                       const std::string& position, const std::string& k) {
  const std::string local = "(row - block_row)";
  const bool rms = norm.op == ir::OpId::RmsNorm;
  return fmt::format("({}[{}] - {}_mean[{}]) * {}_rstd[{}] * {}[{}]{}", names.param(norm.inputs[0]),
                     position, prefix, local, prefix, local, names.param(norm.inputs[1]), k,
                     rms ? "" : " + " + names.param(norm.inputs[2]) + "[" + k + "]");
}

// A layer_norm or rms_norm before a dense (passes/fuse_norm_prologue.cpp): its statistics
// before the K loop, and A normalized as it is staged.
void add_norm_prologue(nn::GemmSpec& spec, const ir::Node& norm, const Names& names,
                       const RowPosition& row_at) {
  add_row_statistics(spec, norm, names, "norm", 0, row_at, "kK", "Prologue");
  spec.a.fetch = "value = " + normalized(norm, names, "norm", row_at("row") + " + k", "k") + ";";
  spec.a.address.clear();  // normalized as it is staged: no plain copy
  spec.note += "; " + norm.describe() + " as a prologue (rows normalized as they are staged)";
}

// `expression` (a float or double of dtype `from`) converted to `to` and back to the compute
// type: what reading a stored cast(from -> to) would give.
std::string cast_value(ir::DType from, ir::DType to, const std::string& expression) {
  if (to == ir::DType::F32 && from == ir::DType::F64) return "static_cast<float>(" + expression + ")";
  return load(to, store(to, expression));  // f16/bf16 round there and back; widening is exact
}

// Whether the GEMM's units round an operand to `to` as they take it (bf16 or f16 tensor cores
// at --precision=bf16/f16): then reading the f32 buffer unchanged is reading the cast.
bool units_round_to(Precision precision, ir::DType to) {
  return sixteen_bit(precision) && precision_name(precision) == ir::dtype_name(to);
}

}  // namespace

KernelSpec emit_epilogue(const KernelRequest& request, const BodyPlan& plan_in) {
  const ir::Node& kernel = request.node;
  const Names names(kernel, request.input_params);
  BodyPlan plan = plan_in;
  // Casts of the kernel's operands (fuse-conv-bias-relu takes autocast's 16-bit copies of
  // inputs and parameters): the GEMM and the epilogue read the operand as stored and convert
  // it as the cast would, so the copy is never stored.
  std::unordered_map<const ir::Value*, const ir::Node*> operand_casts;
  // A cast of the rows a norm prologue or a view makes (fuse-norm-prologue takes autocast's
  // cast between an f32 norm and a 16-bit dense): A is rounded as it is staged.
  const ir::Node* rows_cast = nullptr;
  std::erase_if(plan.compute, [&](const ir::Node* node) {
    if (node->op != ir::OpId::Cast) return false;
    const ir::Node* producer = node->inputs[0]->producer;
    if (!names.param(node->inputs[0]).empty()) {
      operand_casts.emplace(node->results[0], node);
      return true;
    }
    // A cast after views of the result (widening it for an f32 residual) is an epilogue step.
    const bool read_as_rows = std::any_of(plan.compute.begin(), plan.compute.end(), [&](const ir::Node* reader) {
      return is_gemm(*reader) && reader->inputs[0] == node->results[0];
    });
    if (producer && (is_norm(*producer) || ir::is_view_op(producer->op)) && read_as_rows && !rows_cast) {
      rows_cast = node;
      return true;
    }
    return false;
  });
  // 2:4 weights kept compressed (sparsify-two-four; fuse-conv-bias-relu takes their
  // expand_2_4): the GEMM reads the weight from the kept values and positions, kernel operands
  // both.
  std::unordered_map<const ir::Value*, const ir::Node*> expansions;
  std::erase_if(plan.compute, [&](const ir::Node* node) {
    if (node->op != ir::OpId::ExpandTwoFour) return false;
    expansions.emplace(node->results[0], node);
    return true;
  });
  // The value the GEMM reads as `value`, seen through the rows cast.
  const auto uncast = [&](const ir::Value* value) {
    return rows_cast && value == rows_cast->results[0] ? rows_cast->inputs[0] : value;
  };
  const auto cast_of = [&](const ir::Value* value) -> const ir::Node* {
    auto found = operand_casts.find(value);
    return found == operand_casts.end() ? nullptr : found->second;
  };
  // Norms the kernel recomputes (their results are never stored): the one the GEMM reads as
  // its rows is its prologue (fuse-norm-prologue), the others are residuals its epilogue reads
  // (fuse-norm-residual). Their statistics come first; they are not epilogue steps.
  std::vector<const ir::Node*> norms;
  std::erase_if(plan.compute, [&](const ir::Node* node) {
    if (!is_norm(*node)) return false;
    norms.push_back(node);
    return true;
  });
  // View ops before the GEMM make its rows out of a kernel operand (or of the norm's rows): the
  // GEMM reads A through their strided view (fuse-gemm-views).
  std::vector<const ir::Node*> row_views;
  while (ir::is_view_op(plan.compute.front()->op)) {
    row_views.push_back(plan.compute.front());
    plan.compute.erase(plan.compute.begin());
  }
  const ir::Node& anchor = *plan.compute.front();
  const ir::Value* a_source = row_views.empty() ? uncast(anchor.inputs[0]) : row_views.front()->inputs[0];
  const ir::Node* norm = nullptr;
  std::vector<const ir::Node*> residual_norms;
  for (const ir::Node* n : norms) {
    if (n->results[0] == a_source && !norm)
      norm = n;
    else
      residual_norms.push_back(n);
  }
  const ir::Value* rows = norm ? norm->results[0] : row_views.empty() ? nullptr : row_views.front()->inputs[0];
  const ir::Value* rows_param = norm ? norm->inputs[0] : rows;  // the kernel operand A comes from
  KernelRequest inner{anchor, request.kernel_name, {}, request.output_params, {}, request.dynamic_rows, request.precision, {}, {}};
  BodyWriter operand_lambdas(0);
  for (size_t index = 0; index < anchor.inputs.size(); ++index) {
    const ir::Value* input = anchor.inputs[index];
    if (expansions.count(input)) {  // read by read_a_two_four below
      inner.input_params.push_back(names.param(expansions.at(input)->inputs[0]));
      inner.stored_dtypes.emplace_back();
      inner.fused_inputs.emplace_back();
      continue;
    }
    const ir::Node* cast = cast_of(input);
    const ir::Value* read = cast ? cast->inputs[0] : input;
    const bool a_rows = input == anchor.inputs[0] && rows;
    inner.input_params.push_back(a_rows ? names.param(rows_param) : names.param(read));
    inner.stored_dtypes.push_back(cast           ? std::optional<ir::DType>(read->type.dtype)
                                  : a_rows && rows_cast ? std::optional<ir::DType>(rows_param->type.dtype)
                                                        : std::nullopt);
    inner.fused_inputs.emplace_back();
    // A and B on tensor cores that round them as the cast would: read as stored.
    if (!cast || (index < 2 && units_round_to(request.precision, input->type.dtype))) continue;
    // Units that would not round the operand (f32 FMA), or a bias: the loads convert it.
    inner.fused_inputs.back() = "cast_" + inner.input_params.back();
    operand_lambdas.comment(fmt::format("{}: {} -> {} as the GEMM loads it", cast->describe(),
                                        ir::dtype_name(read->type.dtype), ir::dtype_name(input->type.dtype)));
    operand_lambdas.line("const auto {} = [&](long long i) -> float {{ return {}; }};",
                         inner.fused_inputs.back(),
                         cast_value(read->type.dtype, input->type.dtype,
                                    load(read->type.dtype, inner.input_params.back() + "[i]")));
  }

  const ir::Value* a = row_views.empty() ? rows : row_views.back()->results[0];
  if (rows_cast && !rows)
    throw Error(kernel.loc.render(), kernel.describe() + ": a cast before its GEMM rounds a norm's or a view's rows only");
  if (rows && ((anchor.op != ir::OpId::Dense && anchor.op != ir::OpId::Matmul) || uncast(anchor.inputs[0]) != a))
    throw Error(kernel.loc.render(), kernel.describe() + ": a norm prologue or row views feed the rows of a dense or matmul only");
  RowPosition row_at = row_major;
  if (!row_views.empty()) {
    const std::optional<ir::StridedView> view = ir::gemm_rows_view(rows, row_views, norm != nullptr);
    if (!view)
      throw Error(kernel.loc.render(), kernel.describe() + ": the ops before its GEMM are no strided view of whole rows");
    row_at = [view = *view](const std::string& row) { return "(" + ir::row_position(view, row) + ")"; };
  }

  // Transposes and reshapes among the epilogue's ops: the result is stored through their view,
  // and the ops after them read operands in the final layout (out_index); the ones before, in
  // the GEMM's (row * kN + col).
  std::vector<const ir::Node*> out_views;
  for (size_t n = 1; n < plan.compute.size(); ++n)
    if (ir::is_view_op(plan.compute[n]->op)) out_views.push_back(plan.compute[n]);

  // A dense's 2:4 weight is its GEMM's B, and sparse tensor cores take A compressed: the dense
  // runs as its transpose, weight * x^T, whose rows are the result's columns. A norm prologue,
  // row views or a residual norm index x's rows as the GEMM's; the fusion passes leave them out
  // of such a kernel (fusion::compressed_weight_refusal).
  const bool by_weight_rows = anchor.op == ir::OpId::Dense && expansions.count(anchor.inputs[1]);
  if (by_weight_rows && (rows || !residual_norms.empty()))
    throw Error(kernel.loc.render(), kernel.describe() + ": a dense reading a 2:4 weight compressed runs as weight "
                                                         "* x^T, which takes no norm prologue, row views or residual norm");
  nn::GemmSpec spec = anchor.op == ir::OpId::Conv2d ? nn::conv2d_gemm(inner)
                      : by_weight_rows              ? nn::dense_gemm_by_weight_rows(inner)
                      : anchor.op == ir::OpId::Dense ? nn::dense_gemm(inner)
                                                     : nn::matmul_gemm(inner);
  for (const auto& [weight, expand] : expansions) {
    if ((anchor.op != ir::OpId::Conv2d && anchor.op != ir::OpId::Dense) || weight != anchor.inputs[1] ||
        names.param(expand->inputs[0]).empty() || names.param(expand->inputs[1]).empty())
      throw Error(kernel.loc.render(), kernel.describe() + ": a 2:4 weight is expanded for the weight of a conv2d "
                                                           "or dense only, from kernel operands");
    nn::read_a_two_four(spec, {names.param(expand->inputs[0]), names.param(expand->inputs[1]),
                               expand->inputs[0]->type.dtype, anchor.op == ir::OpId::Conv2d ? "group * kM" : "0"});
  }
  // Element (row, col) of the GEMM's result in its own layout ([rows, columns], or transposed
  // back from weight * x^T), what the epilogue's operands before any view are indexed by.
  const std::string gemm_layout_index = by_weight_rows ? "col * kM + row" : "row * kN + col";
  BodyWriter prelude(0);
  BodyWriter epilogue(0);
  const ir::Value* running = anchor.results[0];
  std::optional<ir::StridedView> out_view;
  if (!out_views.empty()) {
    out_view = ir::gemm_output_view(anchor.results[0], out_views);
    if (!out_view || spec.batch != 1 || !spec.a.k_contiguous)
      throw Error(kernel.loc.render(), kernel.describe() + ": its epilogue's views do not keep the GEMM's rows "
                                                           "whole with columns at stride 1");
    spec.out_index = by_weight_rows ? ir::row_position(*out_view, "col") + " + row"
                                    : ir::row_position(*out_view, "row") + " + col";
  }
  // A residual norm's statistics arrays in extra_smem (after the prologue's).
  uint32_t next_array = norm ? 2 : 0;
  int residuals = 0;
  const auto residual_norm = [&](const ir::Value* input) -> const ir::Node* {
    for (const ir::Node* n : residual_norms)
      if (n->results[0] == input) return n;
    return nullptr;
  };
  bool past_views = false;
  for (size_t n = 1; n < plan.compute.size(); ++n) {
    const ir::Node& node = *plan.compute[n];
    if (ir::is_view_op(node.op)) {
      past_views = true;
      running = node.results[0];
      continue;
    }
    emit_element_lambda(prelude, node, names);
    std::string args;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ir::Value* input = node.inputs[i];
      std::string arg = "value";
      if (const ir::Node* recomputed = residual_norm(input)) {
        // A residual recomputed from the norm's input: row statistics before the K loop, then
        // each element normalized as it is read. Its rows are the result's rows (the norm
        // normalizes the GEMM's columns), in the GEMM's layout or the views' final one.
        if (input->type.shape != running->type.shape || spec.batch != 1 || anchor.op == ir::OpId::Conv2d)
          throw Error(kernel.loc.render(), kernel.describe() + ": " + recomputed->describe() +
                                               " must be a residual of a dense's or matmul's [rows, columns] result");
        const bool final_layout = past_views;
        const RowPosition residual_row = [&](const std::string& row) {
          return final_layout ? "(" + ir::row_position(*out_view, row) + ")" : "(" + row + ") * kN";
        };
        const std::string prefix = fmt::format("residual_norm{}", residuals++);
        add_row_statistics(spec, *recomputed, names, prefix, next_array, residual_row, "kN", "Residual");
        next_array += 2;
        arg = normalized(*recomputed, names, prefix, residual_row("row") + " + col", "col");
        spec.note += "; " + recomputed->describe() + " recomputed as the residual";
      } else if (input != running) {
        // An operand cast (a bias autocast made 16-bit) is read as stored, then converted.
        const ir::Node* cast = cast_of(input);
        const ir::Value* read = cast ? cast->inputs[0] : input;
        const std::string param = names.param(read);
        KILN_CHECK(!param.empty()) << node.describe() << " reads a value the epilogue lost";
        std::string index = epilogue_index(node, input, running->type.shape);
        if (index == "out_index" && !out_views.empty() && !past_views) index = gemm_layout_index;
        arg = load(read->type.dtype, param + "[" + index + "]");
        if (cast) arg = cast_value(read->type.dtype, input->type.dtype, arg);
      }
      args += (i ? ", " : "") + arg;
    }
    epilogue.line("value = {}({});  // {}", names.function(node), args, node.describe());
    running = node.results[0];
  }
  if (rows && (spec.batch != 1 || !spec.a.k_contiguous))
    throw Error(kernel.loc.render(), kernel.describe() + ": a norm prologue or row views need the GEMM's rows "
                                                         "as one matrix (no batch of b, a untransposed)");
  if (norm) {
    add_norm_prologue(spec, *norm, names, row_at);
  } else if (!row_views.empty()) {
    spec.a.fetch = fmt::format("value = {};", load(a->type.dtype, names.param(rows_param) + "[" + row_at("row") + " + k]"));
    spec.a.address.clear();  // a view's rows need not be 16-byte aligned
    spec.note += "; A read through the view of " + source_list(row_views);
  }
  if (rows_cast && !units_round_to(request.precision, rows_cast->results[0]->type.dtype))
    spec.a.fetch += fmt::format("\nvalue = {};  // {}", cast_value(rows_cast->inputs[0]->type.dtype,
                                                                  rows_cast->results[0]->type.dtype, "value"),
                                rows_cast->describe());
  if (rows_cast) spec.note += "; A rounded to " + std::string(ir::dtype_name(rows_cast->results[0]->type.dtype)) + " as it is staged";
  spec.prelude = operand_lambdas.take() + prelude.take();
  if (!operand_casts.empty()) {
    std::string sources;
    for (const ir::Node* node : plan_in.compute)
      if (operand_casts.count(node->results[0]))
        sources += fmt::format("{}{} ({} -> {})", sources.empty() ? "" : ", ", node->inputs[0]->name,
                               ir::dtype_name(node->inputs[0]->type.dtype),
                               ir::dtype_name(node->results[0]->type.dtype));
    spec.note += "; reads " + sources + " as stored, converting as it loads";
  }
  if (!spec.epilogue.empty() && spec.epilogue.back() != '\n') spec.epilogue += '\n';
  spec.epilogue += epilogue.take();
  spec.out_dtype = plan.stored->type.dtype;
  if (plan.compute.size() > 1)
    spec.note += "; fused epilogue: " + source_list({plan.compute.begin() + 1, plan.compute.end()});
  return nn::emit_gemm(spec, anchor);
}

}  // namespace kiln::codegen::fused
