// Kernels for the optimizer updates (ir/ops/optimizer.cpp), in two shapes:
//   - one op, one kernel: a grid-stride map over the parameter's elements;
//   - many ops, one kernel (emit_multi_tensor_update): the parameters' element ranges are laid
//     end to end, one grid-stride loop walks the concatenation, and each index finds its
//     parameter by a binary search over the segment offsets, written out as comparisons with
//     constants (no table indexed at run time, so no stack frame). A training step launches once per
//     (optimizer, dtype) instead of once per parameter, which is what apex's
//     multi_tensor_apply and PyTorch's fused/foreach optimizers do for the many small tensors
//     (biases, norms) of a model. Pointers stay ordinary kernel parameters, so the kernel table
//     and both backends see nothing new. CUDA limits a kernel's parameters to 32764 bytes
//     (4096 before CUDA 12.1): append-optimizer makes kernels of at most 4096 bytes each.
// Both shapes write the per-element arithmetic with emit_element below, in float whatever the
// storage dtype; the attributes are compile-time constants, so terms that vanish (no weight
// decay, no momentum) are not emitted at all.
#include "codegen/kernels/optimizer.h"

#include <algorithm>
#include <functional>

#include "codegen/kernels/reduce_util.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "ir/optimizer_operands.h"

namespace kiln::codegen {
namespace {

using ir::DType;

bool is_adam(const ir::Node& node) { return node.op == ir::OpId::AdamUpdate || node.op == ir::OpId::AdamwUpdate; }

double attr_float(const ir::Node& node, const char* name) { return attr<double>(node, name); }

std::string f32(double value) { return literal(DType::F32, value); }

// The pointers of the per-launch scalars an update reads; empty when absent.
struct ScalarPointers {
  std::string step;        // Adam's step count
  std::string lr_scale;    // lr_schedule's factor
  std::string grad_scale;  // grad_norm_clip's or loss_scale_update's factor
};

ScalarPointers scalar_pointers(const ir::Node& node, const std::vector<std::string>& params) {
  const ir::UpdateOperands operands = ir::update_operands(node);
  auto at = [&](int index) { return index >= 0 ? params[index] : std::string(); };
  return {at(operands.step), at(operands.lr_scale), at(operands.grad_scale)};
}

// Constants and per-launch scalars, before any loop. The learning rate is the constant kLr, or
// `lr` = kLr times the step's lr_scale; the gradient factor is `grad_factor` when there is one.
void emit_prologue(BodyWriter& w, const ir::Node& node, const ScalarPointers& scalars) {
  w.line("constexpr float kLr = {};", f32(attr_float(node, "lr")));
  const std::string lr = scalars.lr_scale.empty() ? "kLr" : "lr";
  if (!scalars.lr_scale.empty())
    w.line("const float lr = kLr * {}[0];  // this step's learning rate (lr_schedule)",
           scalars.lr_scale);
  if (!scalars.grad_scale.empty())
    w.line("const float grad_factor = {}[0];  // grad_norm_clip's or loss_scale_update's",
           scalars.grad_scale);
  const double weight_decay = attr_float(node, "weight_decay");
  if (!is_adam(node)) {
    const double momentum = attr_float(node, "momentum");
    if (weight_decay != 0) w.line("constexpr float kWeightDecay = {};", f32(weight_decay));
    if (momentum != 0) {
      w.line("constexpr float kMomentum = {};", f32(momentum));
      w.line("constexpr float kOneMinusDampening = {};",
             f32(1 - attr_float(node, "dampening")));
    }
    return;
  }
  const double beta1 = attr_float(node, "beta1");
  const double beta2 = attr_float(node, "beta2");
  w.line("constexpr float kBeta1 = {};", f32(beta1));
  w.line("constexpr float kBeta2 = {};", f32(beta2));
  // 1 - beta is a literal of its own: computed in float from beta2 = 0.999f it would carry a
  // relative error of ~3e-5, which bias correction then multiplies into every update.
  w.line("constexpr float kOneMinusBeta1 = {};", f32(1 - beta1));
  w.line("constexpr float kOneMinusBeta2 = {};", f32(1 - beta2));
  w.line("constexpr float kEps = {};", f32(attr_float(node, "eps")));
  if (weight_decay != 0 && node.op == ir::OpId::AdamwUpdate && scalars.lr_scale.empty())
    w.line("constexpr float kDecay = {};  // 1 - lr * weight_decay", f32(1 - attr_float(node, "lr") * weight_decay));
  else if (weight_decay != 0 && node.op == ir::OpId::AdamwUpdate)
    w.line("const float kDecay = 1.0f - lr * {};  // 1 - lr * weight_decay", f32(weight_decay));
  else if (weight_decay != 0)
    w.line("constexpr float kWeightDecay = {};", f32(weight_decay));
  const DType step_dtype = node.inputs[4]->type.dtype;
  w.comment("The step count is read at run time, so bias correction needs no recompilation.");
  // Named step_count: the one-op kernel's pointer parameter is `step`.
  w.line("const float step_count = static_cast<float>({});", load(step_dtype, scalars.step + "[0]"));
  w.comment("1 - beta^step as -expm1(step * log1p(-(1 - beta))): no cancellation for beta near 1.");
  w.line("const float bias_correction1 = -expm1f(step_count * log1pf(-kOneMinusBeta1));");
  w.line("const float bias_correction2 = -expm1f(step_count * log1pf(-kOneMinusBeta2));");
  w.line("const float step_size = {} / bias_correction1;", lr);
  w.line("const float inv_sqrt_bias_correction2 = 1.0f / sqrtf(bias_correction2);");
}

// The arithmetic of element `j`'s update: `in` names the operand pointers (param, grad, then
// the state), `out` the result pointers (param, then the state), in the op's order.
void emit_arithmetic(BodyWriter& w, const ir::Node& node, const std::vector<std::string>& in,
                  const std::vector<std::string>& out, const std::string& j) {
  const DType dtype = node.inputs[0]->type.dtype;
  auto at = [&](const std::string& pointer) { return load(dtype, pointer + "[" + j + "]"); };
  auto put = [&](const std::string& pointer, const std::string& value) {
    w.line("{}[{}] = {};", pointer, j, store(dtype, value));
  };
  const double weight_decay = attr_float(node, "weight_decay");
  const ir::UpdateOperands operands = ir::update_operands(node);
  w.line("float p_val = {};", at(in[0]));
  w.line("float g_val = {};", at(in[1]));
  if (operands.grad_scale >= 0) w.line("g_val *= grad_factor;");
  if (!is_adam(node)) {
    if (weight_decay != 0) w.line("g_val += kWeightDecay * p_val;");
    if (operands.state_count == 1) {
      w.line("const float buf_val = kMomentum * {} + kOneMinusDampening * g_val;", at(in[2]));
      put(out[1], "buf_val");
      w.line(attr<bool>(node, "nesterov") ? "g_val += kMomentum * buf_val;  // Nesterov"
                                          : "g_val = buf_val;");
    }
    put(out[0], operands.lr_scale >= 0 ? "p_val - lr * g_val" : "p_val - kLr * g_val");
    return;
  }
  if (weight_decay != 0)
    w.line(node.op == ir::OpId::AdamwUpdate ? "p_val *= kDecay;  // decoupled weight decay"
                                     : "g_val += kWeightDecay * p_val;  // L2 penalty");
  w.line("const float m_val = kBeta1 * {} + kOneMinusBeta1 * g_val;", at(in[2]));
  w.line("const float v_val = kBeta2 * {} + kOneMinusBeta2 * g_val * g_val;", at(in[3]));
  put(out[1], "m_val");
  put(out[2], "v_val");
  w.line("const float denom = sqrtf(v_val) * inv_sqrt_bias_correction2 + kEps;");
  put(out[0], "p_val - step_size * m_val / denom");
}

// Element `j`'s update. With a grad_scale, a factor of 0 (loss_scale_update's verdict on an
// inf or NaN gradient) skips the step: the results are the operands, copied (a no-op where the
// update is in place; the branch is uniform across the launch).
void emit_element(BodyWriter& w, const ir::Node& node, const std::vector<std::string>& in,
                  const std::vector<std::string>& out, const std::string& j) {
  if (ir::update_operands(node).grad_scale < 0) return emit_arithmetic(w, node, in, out, j);
  w.open("if (grad_factor == 0.0f)");
  w.comment("loss scaling found an inf or NaN gradient: this step is skipped");
  for (size_t r = 0; r < out.size(); ++r)
    w.line("{}[{}] = {}[{}];", out[r], j, in[r == 0 ? 0 : r + 1], j);
  w.reopen("else");
  emit_arithmetic(w, node, in, out, j);
  w.close();
}

// The per-element operands: param, grad and the state (not the per-launch scalars).
std::vector<std::string> state_inputs(const ir::Node& node, const std::vector<std::string>& params) {
  const ir::UpdateOperands operands = ir::update_operands(node);
  return {params.begin(), params.begin() + operands.state + operands.state_count};
}

KernelSpec emit_update(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const int64_t count = ir::num_elements(node.inputs[0]->type.shape);
  const std::string type = index_type(count);
  BodyWriter w;
  emit_prologue(w, node, scalar_pointers(node, request.input_params));
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  open_grid_stride_loop(w, "i", type, "kCount");
  emit_element(w, node, state_inputs(node, request.input_params), request.output_params, "i");
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "grid-stride map: one parameter's update, arithmetic in float";
  return spec;
}

// --- multi-tensor ----------------------------------------------------------------------------

[[noreturn]] void reject(const ir::Node& kernel, const std::string& why) {
  throw Error(kernel.loc.render(), kernel.describe() + ": a multi_update kernel " + why);
}

// The kernel parameter of every body value that is a kernel operand or result.
struct Binding {
  std::vector<std::string> in;   // per operand of the update
  std::vector<std::string> out;  // per result of the update
};

Binding bind(const KernelRequest& request, const ir::Node& update) {
  const ir::Graph& body = *request.node.body;
  Binding binding;
  for (const ir::Value* operand : update.inputs) {
    const auto it = std::find(body.inputs.begin(), body.inputs.end(), operand);
    if (it == body.inputs.end())
      reject(request.node, "reads only its operands; " + update.describe() + " reads '" +
                               operand->name + "', computed in the kernel");
    binding.in.push_back(request.input_params[it - body.inputs.begin()]);
  }
  for (const ir::Value* result : update.results) {
    const auto it = std::find(body.outputs.begin(), body.outputs.end(), result);
    if (it == body.outputs.end())
      reject(request.node, "returns every updated tensor; '" + result->name + "' of " +
                               update.describe() + " is not returned");
    binding.out.push_back(request.output_params[it - body.outputs.begin()]);
  }
  return binding;
}

// Lambda parameter names, after the op's operand names: the arithmetic reads the same as in
// the one-op kernel.
std::vector<std::string> lambda_names(const std::vector<std::string>& names, const char* prefix) {
  std::vector<std::string> out;
  for (const std::string& name : names) out.push_back(prefix + name);
  return out;
}

// The host backend's body: thread 0 walks the elements of its block's CUDA threads segment by
// segment, a plain loop per parameter instead of a search per element, and computes the
// prologue (Adam's bias corrections: four libm calls) once per block instead of once per
// element. Each element's arithmetic is the CUDA body's, so the results are its bits.
// The lambda `update` takes the first `operands` of a binding's operands (the per-element ones).
void emit_multi_tensor_host_body(BodyWriter& w, const std::vector<Binding>& bindings, size_t operands,
                                 const std::vector<int64_t>& offsets, const std::string& type) {
  open_host_body(w, {"Host backend: the block's elements parameter by parameter, equal bit for bit to the",
                     "CUDA body below (codegen/kernels/optimizer.cpp). Thread 0 runs it."});
  w.open("for ({0} first = static_cast<{0}>(blockIdx.x) * blockDim.x; first < kTotal; "
         "first += static_cast<{0}>(blockDim.x) * gridDim.x)", type);
  w.line("const {0} last = first + static_cast<{0}>(blockDim.x) < kTotal ? first + static_cast<{0}>(blockDim.x) : kTotal;", type);
  for (size_t s = 0; s < bindings.size(); ++s) {
    std::string args;
    for (size_t k = 0; k < operands; ++k) args += bindings[s].in[k] + ", ";
    for (const std::string& out : bindings[s].out) args += out + ", ";
    const std::string begin = int_literal(offsets[s], type);
    const std::string end = int_literal(offsets[s + 1], type);
    w.line("for ({0} i = first > {1} ? first : {1}, end = last < {2} ? last : {2}; i < end; ++i) "
           "update({3}i - {1});", type, begin, end, args);
  }
  w.close();
  close_host_body(w);
}

}  // namespace

KernelSpec emit_multi_tensor_update(const KernelRequest& request,
                                    const std::vector<const ir::Node*>& updates) {
  const ir::Node& kernel = request.node;
  if (updates.empty()) reject(kernel, "needs at least one update node");
  // Every operand and result is a pointer parameter; NVRTC refuses a kernel past the limit
  // ("Formal parameter space overflowed"), which only a GPU compile would show.
  const size_t parameter_bytes = 8 * (kernel.inputs.size() + kernel.results.size());
  if (parameter_bytes > ir::kMaxKernelParameterBytes)
    reject(kernel, fmt::format("takes {} pointers ({} bytes of kernel parameters), over CUDA's "
                               "{}; split it into kernels of fewer parameters",
                               kernel.inputs.size() + kernel.results.size(), parameter_bytes,
                               ir::kMaxKernelParameterBytes));
  const ir::Node& first = *updates.front();
  const DType dtype = first.inputs[0]->type.dtype;
  const ir::UpdateOperands first_operands = ir::update_operands(first);
  for (const ir::Node* update : updates) {
    if (update->op != ir::OpId::SgdUpdate && !is_adam(*update))
      reject(kernel, "holds only sgd_update, adam_update or adamw_update nodes, not " +
                         update->describe());
    if (update->op != first.op || update->attrs != first.attrs ||
        update->inputs.size() != first.inputs.size() || update->inputs[0]->type.dtype != dtype)
      reject(kernel, "updates with one op, one set of attributes and one dtype; " +
                         update->describe() + " differs from " + first.describe());
    for (const auto& [index, what] : {std::pair{first_operands.step, "step count"},
                                      std::pair{first_operands.lr_scale, "lr_scale"},
                                      std::pair{first_operands.grad_scale, "grad_scale"}})
      if (index >= 0 && update->inputs[index] != first.inputs[index])
        reject(kernel, std::string("reads one ") + what + "; " + update->describe() + " and " +
                           first.describe() + " read different ones");
  }

  std::vector<Binding> bindings;
  std::vector<int64_t> offsets{0};  // segment s is [offsets[s], offsets[s + 1])
  for (const ir::Node* update : updates) {
    bindings.push_back(bind(request, *update));
    offsets.push_back(offsets.back() + ir::num_elements(update->inputs[0]->type.shape));
  }
  const int64_t total = offsets.back();
  const std::string type = index_type(total);
  const std::string element(c_type(dtype));

  // The lambda's pointer names: the registry's operand names (param, grad, ...) and new_*.
  const ir::OpDef& def = ir::OpRegistry::instance().get(first.op);
  std::vector<std::string> operand_names(
      def.input_names.begin(),
      def.input_names.begin() + first_operands.state + first_operands.state_count);
  std::vector<std::string> result_names = lambda_names(
      std::vector<std::string>(operand_names.begin(), operand_names.end()), "new_");
  result_names.erase(result_names.begin() + 1);  // no result for grad

  BodyWriter w;
  w.line("#ifndef __CUDACC__");
  w.comment("Host backend: thread 0 runs the block's elements (below), before the prologue the rest");
  w.comment("would compute for nothing.");
  w.line("if (kiln_host_variant() && threadIdx.x != 0) return;");
  w.line("#endif");
  emit_prologue(w, first, scalar_pointers(first, bindings.front().in));
  w.line("constexpr {} kTotal = {};", type, int_literal(total, type));
  std::string signature;
  for (const std::string& name : operand_names)
    signature += fmt::format("const {}* __restrict__ {}, ", element, name);
  for (const std::string& name : result_names)
    signature += fmt::format("{}* __restrict__ {}, ", element, name);
  w.open("const auto update = [&]({}{} j)", signature, type);
  emit_element(w, first, operand_names, result_names, "j");
  w.close(";");
  emit_multi_tensor_host_body(w, bindings, operand_names.size(), offsets, type);
  open_grid_stride_loop(w, "i", type, "kTotal");
  w.comment("Parameter s owns elements [offset s, offset s + 1) of the loop. A binary search over");
  w.comment("the offsets, written out as comparisons with constants, finds it: a table indexed at");
  w.comment("run time would live in local memory (a stack frame on the GPU).");
  // Segments [lo, hi): a leaf updates one; an inner node splits at the middle offset.
  const std::function<void(size_t, size_t)> dispatch = [&](size_t lo, size_t hi) {
    if (hi - lo == 1) {
      std::string args;
      for (size_t k = 0; k < operand_names.size(); ++k) args += bindings[lo].in[k] + ", ";
      for (const std::string& out : bindings[lo].out) args += out + ", ";
      w.line("update({}i - {});  // {} {}", args, int_literal(offsets[lo], type),
             updates[lo]->describe(), updates[lo]->inputs[0]->type.to_string());
      return;
    }
    const size_t mid = (lo + hi) / 2;
    w.open("if (i < {})", int_literal(offsets[mid], type));
    dispatch(lo, mid);
    w.reopen("else");
    dispatch(mid, hi);
    w.close();
  };
  dispatch(0, updates.size());
  w.close();
  KernelSpec spec = grid_stride_spec(total);
  spec.host_variant = true;
  spec.body = w.take();
  spec.note = fmt::format("multi-tensor {}: {} parameters, {} elements, one grid-stride loop over "
                          "their concatenation",
                          first.op, updates.size(), total);
  return spec;
}

namespace {

// One thread: the factor of the step (the reference's formula and its torch equivalent are in
// ir/eval/kernels_optimizer.cpp).
KernelSpec emit_lr_schedule(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const std::string& decay = attr<std::string>(node, "decay");
  BodyWriter w;
  w.line("constexpr float kWarmup = {};",
         f32(static_cast<double>(attr<int64_t>(node, "warmup_steps"))));
  w.comment("Steps already taken, as torch.optim.lr_scheduler counts (the step is 1-based).");
  w.line("const float taken = static_cast<float>({}) - 1.0f;",
         load(node.inputs[0]->type.dtype, request.input_params[0] + "[0]"));
  w.line("float factor = 1.0f;");
  w.open("if (taken < kWarmup)");
  w.line("factor = (taken + 1.0f) / kWarmup;  // linear warmup");
  if (decay != "constant") {
    w.reopen("else");
    w.line("constexpr float kMinScale = {};", f32(attr_float(node, "min_scale")));
    w.line("constexpr float kDecaySteps = {};",
           f32(static_cast<double>(attr<int64_t>(node, "total_steps") -
                                   attr<int64_t>(node, "warmup_steps"))));
    w.line("const float progress = fminf(fmaxf((taken - kWarmup) / kDecaySteps, 0.0f), 1.0f);");
    if (decay == "cosine")
      w.line("const float shape = 0.5f * (1.0f + cosf(3.14159265358979f * progress));  // cosine");
    else
      w.line("const float shape = 1.0f - progress;  // linear");
    w.line("factor = kMinScale + (1.0f - kMinScale) * shape;");
  }
  w.close();
  w.line("{}[0] = factor;", request.output_params[0]);
  KernelSpec spec;
  spec.grid = Dim3{1, 1, 1};
  spec.block = Dim3{1, 1, 1};
  spec.body = w.take();
  spec.note = fmt::format("one thread: warmup over {} steps, then {} decay",
                          attr<int64_t>(node, "warmup_steps"), decay);
  return spec;
}

// Threads of the one-block kernels: grad_norm_clip, loss_scale_update, prune_mask.
constexpr int64_t kNormBlock = 1024;

// The launch of a one-block kernel; `combines`: its threads combine a value across the block
// (a partial per warp in shared memory, barriers).
KernelSpec one_block_spec(BodyWriter& w, std::string note, bool combines = true) {
  KernelSpec spec;
  spec.grid = Dim3{1, 1, 1};
  spec.block = Dim3{static_cast<uint32_t>(kNormBlock), 1, 1};
  spec.shared_bytes = combines ? static_cast<uint32_t>(kNormBlock / kWarpSize * 4) : 0;
  spec.uses_barriers = combines;
  spec.body = w.take();
  spec.note = std::move(note);
  return spec;
}

// One block: each thread sums the squares of a strided slice of every gradient in turn, the
// block combines them in a fixed order (deterministic), and thread 0 writes norm and factor.
// One SM's bandwidth suffices for the parameters of the models kiln trains today; a two-stage
// reduction is the upgrade for models of hundreds of millions of parameters.
KernelSpec emit_grad_norm_clip(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const bool unscale = attr<bool>(node, "unscale");
  BodyWriter w;
  w.line("constexpr float kMaxNorm = {};", f32(attr_float(node, "max_norm")));
  emit_warp_constants(w, kNormBlock);
  w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  w.line("float acc = 0.0f;");
  for (size_t k = unscale ? 1 : 0; k < node.inputs.size(); ++k) {
    const ir::TensorType& grad = node.inputs[k]->type;
    const int64_t count = ir::num_elements(grad.shape);
    const std::string type = index_type(count);
    w.comment(fmt::format("%{} {}", node.inputs[k]->name, grad.to_string()));
    w.open("for ({} i = threadIdx.x; i < {}; i += blockDim.x)", type, int_literal(count, type));
    w.line("const float g = {};", load(grad.dtype, request.input_params[k] + "[i]"));
    w.line("acc += g * g;");
    w.close();
  }
  emit_block_combine(w, "acc", Combine::Sum, "float", "partial");
  w.open("if (threadIdx.x == 0)");
  if (unscale) {
    w.comment(fmt::format("The gradients are loss-scaled: {}[0] unscales them (0: the step is "
                          "skipped)",
                          request.input_params[0]));
    w.line("const float unscale = {}[0];", request.input_params[0]);
    w.line("const float norm = sqrtf(acc) * unscale;");
  } else {
    w.line("const float norm = sqrtf(acc);");
  }
  w.line("const float coef = kMaxNorm / (norm + 1e-6f);");
  if (unscale)
    w.line("{}[0] = unscale == 0.0f ? 0.0f : (coef < 1.0f ? coef : 1.0f) * unscale;  // the "
           "gradients' factor",
           request.output_params[0]);
  else
    w.line("{}[0] = coef < 1.0f ? coef : 1.0f;  // the gradients' factor", request.output_params[0]);
  w.line("{}[0] = norm;", request.output_params[1]);
  w.close();
  return one_block_spec(w, fmt::format("one block: sum of squares over {} gradients, "
                                       "fixed-order block combine, norm and clip factor{}",
                                       node.inputs.size() - (unscale ? 1 : 0),
                                       unscale ? ", unscaled" : ""));
}

// One block, as grad_norm_clip: each thread tests a strided slice of every gradient for inf
// and NaN (an all-ones exponent, a bit test that no fast-math flag can fold away), the block
// combines the flags, and thread 0 writes the factor and the scaler's next state.
KernelSpec emit_loss_scale_update(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const std::vector<std::string>& in = request.input_params;
  const std::vector<std::string>& out = request.output_params;
  BodyWriter w;
  w.line("constexpr float kGrowthFactor = {};", f32(attr_float(node, "growth_factor")));
  w.line("constexpr float kBackoffFactor = {};", f32(attr_float(node, "backoff_factor")));
  w.line("constexpr int kGrowthInterval = {};", attr<int64_t>(node, "growth_interval"));
  emit_warp_constants(w, kNormBlock);
  w.line("int* partial = reinterpret_cast<int*>(kiln_smem);  // [kWarps]");
  w.line("int bad = 0;  // 1: this thread saw an inf or NaN");
  for (size_t k = 3; k < node.inputs.size(); ++k) {
    const ir::TensorType& grad = node.inputs[k]->type;
    const int64_t count = ir::num_elements(grad.shape);
    const std::string type = index_type(count);
    w.comment(fmt::format("%{} {}", node.inputs[k]->name, grad.to_string()));
    w.open("for ({} i = threadIdx.x; i < {}; i += blockDim.x)", type, int_literal(count, type));
    w.line("const float g = {};", load(grad.dtype, in[k] + "[i]"));
    w.line("bad |= (__float_as_uint(g) & 0x7f800000u) == 0x7f800000u;");
    w.close();
  }
  emit_block_combine(w, "bad", Combine::Max, "int", "partial");
  w.open("if (threadIdx.x == 0)");
  w.comment(fmt::format("{}: the gradients' factor; {}, {}, {}: the next scale, good steps, "
                        "skipped steps",
                        out[0], out[1], out[2], out[3]));
  w.line("const float current = {}[0];  // this step's scale", in[0]);
  w.open("if (bad)");
  w.line("{}[0] = 0.0f;  // skip this step", out[0]);
  w.line("{}[0] = current * kBackoffFactor;", out[1]);
  w.line("{}[0] = 0;", out[2]);
  w.line("{}[0] = {}[0] + 1;", out[3], in[2]);
  w.reopen("else");
  w.line("const int good = {}[0] + 1;", in[1]);
  w.line("{}[0] = 1.0f / current;  // unscale the gradients", out[0]);
  w.line("const float grown = current * kGrowthFactor;");
  w.comment("Never grown past f32's range to inf (torch's _amp_update_scale_ keeps it too).");
  w.line("const bool grow = good >= kGrowthInterval && "
         "(__float_as_uint(grown) & 0x7f800000u) != 0x7f800000u;");
  w.line("{}[0] = grow ? grown : current;", out[1]);
  w.line("{}[0] = good >= kGrowthInterval ? 0 : good;", out[2]);
  w.line("{}[0] = {}[0];", out[3], in[2]);
  w.close();
  w.close();
  return one_block_spec(w, fmt::format("one block: an inf/NaN test over {} gradients, "
                                       "fixed-order block combine, the loss scale's next state",
                                       node.inputs.size() - 3));
}

// prune_mask: one block. A step that prunes nothing copies the mask (the branch is uniform, so
// no barrier is reached). A 2:4 step ranks each group of 4 in registers. An unstructured step
// finds the threshold by bisection over the bit patterns of |w| (ordered as the magnitudes
// are, for non-negative floats): 31 block-wide counts of {|w| <= t}, each a fixed-order
// combine, so every thread ends with the same t; then keeps the mask where |w| > t.
KernelSpec emit_prune_mask(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const std::vector<std::string>& in = request.input_params;
  const std::string& out = request.output_params[0];
  const ir::DType dtype = node.inputs[0]->type.dtype;
  const int64_t count = ir::num_elements(node.inputs[0]->type.shape);
  const std::string type = index_type(count);
  const bool two_four = attr<std::string>(node, "pattern") == "2:4";
  BodyWriter w;
  w.line("constexpr long long kStart = {};", attr<int64_t>(node, "start"));
  w.line("constexpr long long kEnd = {};", attr<int64_t>(node, "end"));
  w.line("constexpr long long kFrequency = {};", attr<int64_t>(node, "frequency"));
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("const long long t = static_cast<long long>({});  // this step",
         load(node.inputs[2]->type.dtype, in[2] + "[0]"));
  w.open("if (t < kStart || t > kEnd || ((t - kStart) % kFrequency != 0 && t != kEnd))");
  w.comment("Not a pruning step: the mask as it is.");
  w.line("for ({} i = threadIdx.x; i < kCount; i += blockDim.x) {}[i] = {}[i];", type, out, in[1]);
  w.line("return;");
  w.close();
  auto magnitude = [&](const std::string& i) {
    return fmt::format("(__float_as_uint({}) & 0x7fffffffu)", load(dtype, in[0] + "[" + i + "]"));
  };
  if (two_four) {
    w.comment("2:4: each group of 4 keeps its 2 largest magnitudes (the lower index on a tie).");
    w.open("for ({} g = threadIdx.x * 4; g < kCount; g += blockDim.x * 4)", type);
    w.line("unsigned int m[4];");
    w.line("for (int j = 0; j < 4; ++j) m[j] = {};", magnitude("g + j"));
    w.open("for (int j = 0; j < 4; ++j)");
    w.line("int beaten = 0;");
    w.line("for (int o = 0; o < 4; ++o) beaten += m[o] > m[j] || (m[o] == m[j] && o < j);");
    w.line("{}[g + j] = {};", out, store(dtype, "beaten < 2 ? 1.0f : 0.0f"));
    w.close();
    w.close();
  } else {
    w.line("constexpr double kSparsity = {};", attr_float(node, "sparsity"));
    w.comment("The cubic schedule's sparsity at this step, and how many weights that prunes.");
    w.line("const double progress = kEnd == kStart ? 1.0 : static_cast<double>(t - kStart) / "
           "static_cast<double>(kEnd - kStart);");
    w.line("const double remaining = 1.0 - progress;");
    w.line("const long long k = static_cast<long long>(floor(kSparsity * (1.0 - remaining * "
           "remaining * remaining) * static_cast<double>(kCount)));");
    emit_warp_constants(w, kNormBlock);
    w.line("int* partial = reinterpret_cast<int*>(kiln_smem);  // [kWarps]");
    w.comment("The largest t with at most k magnitudes <= t: lo holds (count <= k), hi does not.");
    w.line("long long lo = -1, hi = 0x7f800001ll;");
    w.open("while (hi - lo > 1)");
    w.line("const long long mid = lo + (hi - lo) / 2;");
    w.line("int below = 0;");
    w.line("for ({} i = threadIdx.x; i < kCount; i += blockDim.x) below += {} <= mid;", type,
           magnitude("i"));
    emit_block_combine(w, "below", Combine::Sum, "int", "partial");
    w.line("if (below <= k) lo = mid; else hi = mid;");
    w.close();
    w.open("for ({} i = threadIdx.x; i < kCount; i += blockDim.x)", type);
    w.line("{}[i] = static_cast<long long>({}) <= lo ? {} : {}[i];", out, magnitude("i"),
           store(dtype, "0.0f"), in[1]);
    w.close();
  }
  return one_block_spec(w,
                        two_four ? fmt::format("one block: the 2:4 mask of {} weights", count)
                                 : fmt::format("one block: magnitude threshold of {} weights by "
                                               "bisection (31 block-wide counts)",
                                               count),
                        /*combines=*/!two_four);
}

// all_reduce and broadcast in one process: the mean over one rank, and the root's values, are
// each input itself, so the kernel copies them (what `kiln run` and the tests of a
// data-parallel program compute). Across processes the runtime performs the collective in this
// kernel's place (Kernel::collective, runtime/distributed/), as a library call replaces a
// generated kernel.
KernelSpec emit_collective(const KernelRequest& request) {
  const ir::Node& node = request.node;
  BodyWriter w;
  if (node.op == ir::OpId::AllReduce)
    w.comment(fmt::format("bucket {}: one rank's mean is its own gradients; across ranks the "
                          "runtime all-reduces this bucket instead of launching this kernel",
                          attr<int64_t>(node, "bucket")));
  else
    w.comment(fmt::format("broadcast from rank {}: one rank holds the root's values; across "
                          "ranks the runtime broadcasts instead of launching this kernel",
                          attr<int64_t>(node, "root")));
  int64_t largest = 1;
  for (const ir::Value* x : node.inputs) largest = std::max(largest, ir::num_elements(x->type.shape));
  const std::string index = index_type(largest);
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const ir::TensorType& type = node.inputs[k]->type;
    const int64_t count = ir::num_elements(type.shape);
    w.comment(fmt::format("%{} {}", node.inputs[k]->name, type.to_string()));
    open_grid_stride_loop(w, "i" + std::to_string(k), index, int_literal(count, index));
    w.line("{}[i{}] = {}[i{}];", request.output_params[k], k, request.input_params[k], k);
    w.close();
  }
  KernelSpec spec = grid_stride_spec(largest);
  spec.body = w.take();
  spec.note = fmt::format("one process: a copy of {} tensor(s); across processes the "
                          "runtime's {}",
                          node.inputs.size(), node.op == ir::OpId::AllReduce ? "all-reduce" : "broadcast");
  return spec;
}

}  // namespace

void add_optimizer_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::LrSchedule, emit_lr_schedule);
  table.emplace_back(ir::OpId::GradNormClip, emit_grad_norm_clip);
  table.emplace_back(ir::OpId::LossScaleUpdate, emit_loss_scale_update);
  table.emplace_back(ir::OpId::PruneMask, emit_prune_mask);
  table.emplace_back(ir::OpId::AllReduce, emit_collective);
  table.emplace_back(ir::OpId::Broadcast, emit_collective);
  table.emplace_back(ir::OpId::SgdUpdate, emit_update);
  table.emplace_back(ir::OpId::AdamUpdate, emit_update);
  table.emplace_back(ir::OpId::AdamwUpdate, emit_update);
}

}  // namespace kiln::codegen
