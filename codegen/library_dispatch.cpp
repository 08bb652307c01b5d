// Matching kernels to vendor library routines. A kernel is read as
//
//   anchor (conv2d | dense | matmul)  ->  bias, residual add, one activation, in any order
//                                         with the activation last  ->  reshape-like ops
//
// and accepted only when the library's fixed formula computes the same thing: cuDNN's
// y = act(conv(x) + z + bias) (cudnnConvolutionBiasActivationForward, cuDNN API reference) and
// cuBLASLt's D = epilogue(A B + C) with the bias added before the activation (cublasLtMatmul,
// cuBLAS docs, "cublasLtEpilogue_t"). Sums commute, so bias and residual may come in either
// order; nothing may follow the activation except ops that only rename the shape.
//
// cuBLASLt is column-major; row-major Y = A B is computed as the column-major Y^T = B^T A^T,
// which reads the same bytes (library_runner.cpp), so the call here stays row-major.
#include "codegen/library_dispatch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/diagnostic.h"
#include "ir/image_layout.h"
#include "ir/kernel_region.h"

namespace kiln::codegen {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// cuDNN's FFT and Winograd algorithms need scratch on the order of the tensors they transform;
// implicit GEMM needs little. Twice the tensors, within these bounds, lets the heuristics pick
// freely for small layers without a large layer reserving hundreds of megabytes.
constexpr int64_t kConvWorkspaceMin = 1 * kMiB;
constexpr int64_t kConvWorkspaceMax = 64 * kMiB;
// NVIDIA's recommended cuBLASLt workspace: 32 MiB on Hopper, 4 MiB elsewhere (cuBLAS docs,
// "cublasSetWorkspace"). The arch is unknown here, so only large problems, where split-K and
// stream-K pay off, reserve the larger size.
constexpr int64_t kMatmulWorkspaceSmall = 4 * kMiB;
constexpr int64_t kMatmulWorkspaceLarge = 32 * kMiB;
constexpr int64_t kLargeMatmulFlops = int64_t{1} << 30;
// cuDNN's legacy API describes tensors with int dims and indexes them with int.
constexpr int64_t kCudnnMaxElements = std::numeric_limits<int32_t>::max();

// What the kernel computes, read off the node: the anchor, the operand positions it reads and
// the epilogue after it. A refusal sets `why`.
struct Pattern {
  const ir::Node* anchor = nullptr;
  const ir::Value* value = nullptr;  // the anchor's result through the epilogue, pre-reshape
  int x = -1, weight = -1, bias = -1, residual = -1;
  LibraryActivation activation = LibraryActivation::None;
  std::string activation_op;  // the op that set `activation`, for messages
  std::string why;
};

bool refuse(Pattern& p, std::string why) {
  p.why = std::move(why);
  return false;
}
Pattern refused(Pattern& p, std::string why) {
  p.why = std::move(why);
  return p;
}

int operand_position(const std::vector<ir::Value*>& operands, const ir::Value* value) {
  auto it = std::find(operands.begin(), operands.end(), value);
  return it == operands.end() ? -1 : static_cast<int>(it - operands.begin());
}

// Whether a broadcast operand of `shape` adds one value per channel along `axis` of `out`.
bool per_channel(const ir::Shape& shape, const ir::Shape& out, int axis) {
  if (shape.empty() || shape.size() > out.size()) return false;
  const size_t offset = out.size() - shape.size();  // NumPy aligns trailing dims
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t dim = i + offset;
    const int64_t expected = static_cast<int>(dim) == axis ? out[dim] : 1;
    if (shape[i] != expected) return false;
  }
  return static_cast<int>(offset) <= axis;
}

double float_attr(const ir::Node& node, const char* name) {
  return std::get<double>(node.attrs.at(name));
}

// One epilogue node after the anchor; false (with `pattern.why`) when it does not fit.
bool absorb(Pattern& p, const ir::Node& node, const std::vector<ir::Value*>& operands,
            int channel_axis) {
  const ir::OpId op = node.op;
  const std::string after = fmt::format("{} after {}", op, p.anchor->op);
  if (!p.activation_op.empty())
    return refuse(p, fmt::format("{} after {}: the library applies its activation last", op,
                                 p.activation_op));
  if (op == ir::OpId::Relu || op == ir::OpId::Gelu || op == ir::OpId::Clip) {
    if (node.inputs[0] != p.value) return refuse(p, after + ": reads another value");
    if (op == ir::OpId::Gelu) {
      const auto& form = std::get<std::string>(node.attrs.at("approximate"));
      if (form != "tanh") {
        return refuse(p, after + ": this gelu is exact (erf); cuBLASLt's GELU epilogue is the "
                                 "tanh approximation");
      }
      p.activation = LibraryActivation::GeluTanh;
    } else if (op == ir::OpId::Clip) {
      // clip to [0, inf) is relu; any other bound has no library epilogue.
      if (float_attr(node, "min") != 0.0 || !std::isinf(float_attr(node, "max")))
        return refuse(p, after + ": only clip to [0, inf) (relu) has a library epilogue");
      p.activation = LibraryActivation::Relu;
    } else {
      p.activation = LibraryActivation::Relu;
    }
    p.activation_op = ir::to_string(op);
    p.value = node.results[0];
    return true;
  }
  if (op == ir::OpId::Cast)
    return refuse(p, after + ": the library stores its result in its operands' dtype");
  if (op != ir::OpId::BiasAdd && op != ir::OpId::Add)
    return refuse(p, after + ": no library epilogue computes it");
  // bias_add(v, b) or add(v, p) / add(p, v): exactly one operand is the running value.
  const bool first = node.inputs[0] == p.value;
  const bool second = node.inputs[1] == p.value;
  if (first == second) return refuse(p, after + ": must read the running value once");
  if (op == ir::OpId::BiasAdd && !first) return refuse(p, after + ": reads another value");
  const ir::Value* other = first ? node.inputs[1] : node.inputs[0];
  const int position = operand_position(operands, other);
  if (position < 0) return refuse(p, after + ": its operand is computed inside the kernel");
  if (const ir::DType dtype = p.anchor->results[0]->type.dtype; other->type.dtype != dtype) {
    return refuse(p, fmt::format("{}: operand is {}, {} {}: a library call reads and writes one "
                                 "dtype",
                                 after, ir::dtype_name(other->type.dtype), p.anchor->op,
                                 ir::dtype_name(dtype)));
  }
  const ir::Shape& out = p.value->type.shape;
  bool is_bias = false;
  if (op == ir::OpId::BiasAdd) {
    const auto axis = ir::normalize_axis(std::get<int64_t>(node.attrs.at("axis")),
                                         static_cast<int>(out.size()));
    if (axis != channel_axis)
      return refuse(p, after + ": the bias is not along the output channels");
    is_bias = true;
  } else if (other->type.shape != out) {
    if (!per_channel(other->type.shape, out, channel_axis)) {
      return refuse(p, fmt::format("{}: operand {} is neither a residual of shape {} nor one "
                                   "value per output channel",
                                   after, other->type.to_string(), ir::shape_to_string(out)));
    }
    is_bias = true;
  }
  int& slot = is_bias ? p.bias : p.residual;
  if (slot >= 0)
    return refuse(p, fmt::format("{}: a second {}", after, is_bias ? "bias" : "residual"));
  slot = position;
  p.value = node.results[0];
  return true;
}

// The anchor's operands: x, weight and an optional bias operand, as kernel operand positions.
bool read_anchor(Pattern& p, const std::vector<ir::Value*>& operands) {
  const ir::Node& anchor = *p.anchor;
  if (auto it = anchor.attrs.find("k_chunk"); it != anchor.attrs.end() && std::get<int64_t>(it->second) > 0)
    return refuse(p, "split-K partial sums (k_chunk): the library computes whole results");
  p.x = operand_position(operands, anchor.inputs[0]);
  p.weight = operand_position(operands, anchor.inputs[1]);
  if (anchor.inputs.size() > 2) p.bias = operand_position(operands, anchor.inputs[2]);
  if (p.x < 0 || p.weight < 0 || (anchor.inputs.size() > 2 && p.bias < 0))
    return refuse(p, ir::to_string(anchor.op) + " reads a value computed inside the kernel");
  p.value = anchor.results[0];
  return true;
}

Pattern match(const ir::Node& node) {
  Pattern p;
  if (!node.is_kernel()) {
    if (node.op != ir::OpId::Conv2d && node.op != ir::OpId::Dense && node.op != ir::OpId::Matmul) {
      p.why = ir::to_string(node.op) + ": no library routine";
      return p;
    }
    p.anchor = &node;
    read_anchor(p, node.inputs);
    return p;
  }
  const ir::Graph& body = *node.body;
  if (ir::kernel_kind(node) != ir::kEpilogueKernel) {
    p.why = "a " + ir::kernel_kind(node) + " kernel: only epilogue kernels map to libraries";
    return p;
  }
  if (body.nodes().empty() || body.outputs.size() != 1 || node.results.size() != 1) {
    p.why = "the kernel has more than one result";
    return p;
  }
  const ir::Node& anchor = *body.nodes().front();
  if (anchor.op == ir::OpId::Cast) {
    // autocast's operand cast, which the kernel applies as it loads (fuse-conv-bias-relu).
    p.why = fmt::format("it casts an operand to {} as it loads it; the library calls read "
                        "tensors as stored",
                        ir::dtype_name(anchor.results[0]->type.dtype));
    return p;
  }
  if (anchor.op != ir::OpId::Conv2d && anchor.op != ir::OpId::Dense && anchor.op != ir::OpId::Matmul) {
    p.why = "the kernel starts with " + ir::to_string(anchor.op) + ", not conv2d, dense or matmul";
    return p;
  }
  p.anchor = &anchor;
  if (!read_anchor(p, body.inputs)) return p;
  const int rank = p.value->type.rank();
  const int channel_axis = anchor.op == ir::OpId::Conv2d ? ir::channel_axis(ir::image_layout(anchor)) : rank - 1;
  const ir::Value* result = p.value;
  for (size_t i = 1; i < body.nodes().size(); ++i) {
    const ir::Node& step = *body.nodes()[i];
    if (ir::is_reshape_like(step.op)) {
      // Shape-only: the bytes of the result are the bytes of the operand.
      if (step.inputs[0] != result) return refused(p, ir::to_string(step.op) + " of another value");
      result = step.results[0];
      continue;
    }
    if (result != p.value) return refused(p, ir::to_string(step.op) + " after a reshape");
    if (!absorb(p, step, body.inputs, channel_axis)) return p;
    result = p.value;
  }
  if (body.outputs[0] != result) p.why = "the kernel returns an intermediate value";
  return p;
}

// The one dtype every tensor of `node` has, when it is one the libraries take (f32, bf16, f16);
// else nullopt with `why`. cuDNN's 16-bit configurations store x, w, y, z and the bias alike,
// and a cuBLASLt call here has one layout type for A, B, C and D.
std::optional<ir::DType> library_dtype(const ir::Node& node, std::string& why) {
  const ir::DType dtype = node.results[0]->type.dtype;
  for (const ir::Value* value : node.inputs) {
    if (value->type.dtype == dtype) continue;
    why = fmt::format("{}: mixes {} and {} tensors (a library call reads and writes one dtype)",
                      node.op, ir::dtype_name(value->type.dtype), ir::dtype_name(dtype));
    return std::nullopt;
  }
  if (!library_takes(dtype)) {
    why = fmt::format("{}: {} tensors (the library calls take f32, bf16 or f16)", node.op,
                      ir::dtype_name(dtype));
    return std::nullopt;
  }
  return dtype;
}

// " (tf32 math)" where f32 tensors may be rounded for tensor cores; 16-bit tensors say it
// themselves.
std::string math_text(const LibraryCall& call) {
  if (call.dtype != ir::DType::F32 || call.math == Precision::F32) return "";
  return fmt::format(" ({} math)", precision_name(call.math));
}

std::string epilogue_text(const LibraryCall& call) {
  std::string text;
  if (call.bias) text += " + bias";
  if (call.residual) text += " + residual";
  if (call.activation != LibraryActivation::None)
    text += fmt::format(" + {}", library_activation_name(call.activation));
  return text;
}

std::optional<LibraryCall> conv_call(const Pattern& p, LibraryCall call, std::string& why) {
  const ir::Node& conv = *p.anchor;
  const ir::ImageLayout layout = ir::image_layout(conv);
  // [N, C, H, W], [K, C/groups, R, S], [N, K, P, Q] in either layout.
  const ir::Shape x = ir::to_nchw(conv.inputs[0]->type.shape, layout);
  const ir::Shape w = ir::to_nchw(conv.inputs[1]->type.shape, layout);
  const ir::Shape y = ir::to_nchw(conv.results[0]->type.shape, layout);
  const auto& pad = std::get<std::vector<int64_t>>(conv.attrs.at("pad"));
  const auto& stride = std::get<std::vector<int64_t>>(conv.attrs.at("stride"));
  const auto& dilation = std::get<std::vector<int64_t>>(conv.attrs.at("dilation"));
  if (pad[0] != pad[2] || pad[1] != pad[3]) {
    why = fmt::format("conv2d pad [{}]: cuDNN pads both sides alike", fmt::join(pad, ","));
    return std::nullopt;
  }
  for (const ir::Shape* shape : {&x, &w, &y}) {
    if (ir::num_elements(*shape) > kCudnnMaxElements) {
      why = "a conv2d tensor has 2^31 elements or more: beyond cuDNN's legacy API";
      return std::nullopt;
    }
  }
  if (!call.bias && (call.residual || call.activation != LibraryActivation::None)) {
    why = "conv2d without bias: cuDNN's fused routine takes a bias";
    return std::nullopt;
  }
  if (call.activation == LibraryActivation::GeluTanh) {
    why = p.activation_op + " after conv2d: cuDNN's fused routine applies relu or nothing";
    return std::nullopt;
  }
  ConvCall c{x[0], x[1], x[2], x[3], w[0], w[2], w[3],
             std::get<int64_t>(conv.attrs.at("groups")),
             pad[0], pad[1], stride[0], stride[1], dilation[0], dilation[1], y[2], y[3]};
  c.nhwc = layout == ir::ImageLayout::Nhwc;
  call.library = std::string(kCudnnLibrary);
  call.routine = call.bias ? "cudnnConvolutionBiasActivationForward" : "cudnnConvolutionForward";
  std::string text = fmt::format("conv {} {}x{}x{}x{} * {}x{}x{}x{} pad {},{} stride {},{}",
                                 ir::dtype_name(call.dtype), c.n, c.c, c.h, c.w, c.k,
                                 c.c / c.groups, c.r, c.s, c.pad_h, c.pad_w, c.stride_h,
                                 c.stride_w);
  if (c.nhwc) text += " nhwc";
  if (c.dilation_h != 1 || c.dilation_w != 1)
    text += fmt::format(" dilation {},{}", c.dilation_h, c.dilation_w);
  if (c.groups != 1) text += fmt::format(" groups {}", c.groups);
  call.descriptor = text + epilogue_text(call);
  const auto element_bytes = static_cast<int64_t>(ir::dtype_size(call.dtype));
  const int64_t tensor_bytes = (ir::num_elements(x) + ir::num_elements(y)) * element_bytes;
  call.workspace_bytes = std::clamp(2 * tensor_bytes, kConvWorkspaceMin, kConvWorkspaceMax);
  call.op = c;
  return call;
}

// The strided-batch stride of one operand with batch dims `dims` against the output's `out`:
// its matrix size when it has every batch, 0 when it has one matrix for all, else nullopt
// (a partial broadcast, which one stride cannot express).
std::optional<int64_t> batch_stride(const ir::Shape& shape, const ir::Shape& out_batch) {
  const ir::Shape dims(shape.begin(), shape.end() - 2);
  const int64_t matrix = shape[shape.size() - 2] * shape.back();
  if (ir::num_elements(dims) == 1) return 0;
  ir::Shape padded(out_batch.size() - std::min(out_batch.size(), dims.size()), 1);
  padded.insert(padded.end(), dims.begin(), dims.end());
  if (padded != out_batch) return std::nullopt;
  return matrix;
}

std::optional<LibraryCall> matmul_call(const Pattern& p, LibraryCall call, std::string& why) {
  const ir::Node& anchor = *p.anchor;
  const ir::Shape& a = anchor.inputs[0]->type.shape;
  const ir::Shape& b = anchor.inputs[1]->type.shape;
  const ir::Shape& y = anchor.results[0]->type.shape;
  MatmulCall m;
  if (anchor.op == ir::OpId::Dense) {
    // x [..., K] @ weight[N, K]^T: the leading dims are rows of one matrix.
    m.m = ir::num_elements(a, 0, a.size() - 1);
    m.k = a.back();
    m.n = b[0];
    m.transpose_b = true;
  } else {
    m.transpose_a = std::get<bool>(anchor.attrs.at("transpose_a"));
    m.transpose_b = std::get<bool>(anchor.attrs.at("transpose_b"));
    m.m = y[y.size() - 2];
    m.n = y.back();
    m.k = m.transpose_a ? a[a.size() - 2] : a.back();
    const ir::Shape out_batch(y.begin(), y.end() - 2);
    m.batch = ir::num_elements(out_batch);
    const std::optional<int64_t> stride_a = batch_stride(a, out_batch);
    const std::optional<int64_t> stride_b = batch_stride(b, out_batch);
    if (!stride_a || !stride_b) {
      why = fmt::format("matmul of {} and {}: a partial batch broadcast is no strided batch",
                        ir::shape_to_string(a), ir::shape_to_string(b));
      return std::nullopt;
    }
    m.batch_stride_a = *stride_a;
    m.batch_stride_b = *stride_b;
    // Every batch against one b, a untransposed: the batches of a are rows of one matrix, and
    // one large GEMM beats a batch of small ones.
    if (m.batch > 1 && m.batch_stride_b == 0 && m.batch_stride_a != 0 && !m.transpose_a) {
      m.m *= m.batch;
      m.batch = 1;
      m.batch_stride_a = 0;
    }
    if (m.batch == 1) m.batch_stride_a = m.batch_stride_b = 0;
  }
  call.library = std::string(kCublasLtLibrary);
  call.routine = "cublasLtMatmul";
  const std::string a_text =
      m.transpose_a ? fmt::format("({}x{})^T", m.k, m.m) : fmt::format("{}x{}", m.m, m.k);
  const std::string b_text =
      m.transpose_b ? fmt::format("({}x{})^T", m.n, m.k) : fmt::format("{}x{}", m.k, m.n);
  std::string batch_text;
  if (m.batch > 1) {
    batch_text = fmt::format("{} x ", m.batch);
    if (m.batch_stride_a == 0) batch_text += "(a shared) ";
    if (m.batch_stride_b == 0) batch_text += "(b shared) ";
  }
  call.descriptor = fmt::format("{} {} {}{} * {}{}", anchor.op, ir::dtype_name(call.dtype),
                                batch_text, a_text, b_text, epilogue_text(call));
  const int64_t flops = 2 * m.batch * m.m * m.n * m.k;
  call.workspace_bytes = flops >= kLargeMatmulFlops ? kMatmulWorkspaceLarge : kMatmulWorkspaceSmall;
  call.op = m;
  return call;
}

// conv2d's gradients on cuDNN's backward routines: conv2d_grad_input is
// cudnnConvolutionBackwardData (dx from dy and w), conv2d_grad_weight
// cudnnConvolutionBackwardFilter (dw from dy and x), both with beta = 0 (they overwrite their
// result, as the kernel does). Unfused nodes only (nothing fuses into them); split-K partial
// weights (k_chunk) are the generated kernel's own form.
std::optional<LibraryCall> conv_grad_call(const ir::Node& node, const LibrarySelection& selection,
                                          Precision precision, std::string& why) {
  const bool data = node.op == ir::OpId::Conv2dGradInput;
  const std::string op = ir::to_string(node.op);
  const auto& pad = std::get<std::vector<int64_t>>(node.attrs.at("pad"));
  const auto chunk = node.attrs.find("k_chunk");
  if (!selection.cudnn) {
    why = op + ": cuDNN not selected (--library)";
    return std::nullopt;
  }
  const std::optional<ir::DType> dtype = library_dtype(node, why);
  if (!dtype) return std::nullopt;
  if (chunk != node.attrs.end() && std::get<int64_t>(chunk->second) > 0)
    why = op + " with k_chunk: split-K partial weights are the generated kernel's";
  else if (pad[0] != pad[2] || pad[1] != pad[3])
    why = fmt::format("{} pad [{}]: cuDNN pads both sides alike", op, fmt::join(pad, ","));
  if (!why.empty()) return std::nullopt;
  const ir::Shape& dy = node.inputs[0]->type.shape;
  const ir::Shape& x = data ? node.results[0]->type.shape : node.inputs[1]->type.shape;
  const ir::Shape& w = data ? node.inputs[1]->type.shape : node.results[0]->type.shape;
  for (const ir::Shape* shape : {&x, &w, &dy}) {
    if (ir::num_elements(*shape) > kCudnnMaxElements) {
      why = op + ": a tensor has 2^31 elements or more: beyond cuDNN's legacy API";
      return std::nullopt;
    }
  }
  const auto& stride = std::get<std::vector<int64_t>>(node.attrs.at("stride"));
  const auto& dilation = std::get<std::vector<int64_t>>(node.attrs.at("dilation"));
  ConvCall c{x[0], x[1], x[2], x[3], w[0], w[2], w[3], std::get<int64_t>(node.attrs.at("groups")),
             pad[0], pad[1], stride[0], stride[1], dilation[0], dilation[1], dy[2], dy[3],
             data ? ConvDirection::BackwardData : ConvDirection::BackwardFilter};
  LibraryCall call;
  call.library = std::string(kCudnnLibrary);
  call.routine = data ? "cudnnConvolutionBackwardData" : "cudnnConvolutionBackwardFilter";
  call.dy_arg = 0;
  call.x_arg = data ? -1 : 1;
  call.weight_arg = data ? 1 : -1;
  call.out_arg = 2;
  call.math = precision;
  call.dtype = *dtype;
  call.descriptor = fmt::format("conv {} {} {}x{}x{}x{} * {}x{}x{}x{} pad {},{} stride {},{}",
                                data ? "backward data" : "backward filter",
                                ir::dtype_name(call.dtype), c.n, c.c, c.h, c.w,
                                c.k, c.c / c.groups, c.r, c.s, c.pad_h, c.pad_w, c.stride_h,
                                c.stride_w);
  if (c.dilation_h != 1 || c.dilation_w != 1)
    call.descriptor += fmt::format(" dilation {},{}", c.dilation_h, c.dilation_w);
  if (c.groups != 1) call.descriptor += fmt::format(" groups {}", c.groups);
  call.descriptor += math_text(call);
  const auto element_bytes = static_cast<int64_t>(ir::dtype_size(call.dtype));
  const int64_t tensor_bytes = (ir::num_elements(x) + ir::num_elements(dy)) * element_bytes;
  call.workspace_bytes = std::clamp(2 * tensor_bytes, kConvWorkspaceMin, kConvWorkspaceMax);
  call.op = c;
  return call;
}

std::optional<LibraryCall> select(const ir::Node& node, const LibrarySelection& selection,
                                  Precision precision, std::string& why) {
  if (node.op == ir::OpId::Conv2dGradInput || node.op == ir::OpId::Conv2dGradWeight)
    return conv_grad_call(node, selection, precision, why);
  const Pattern p = match(node);
  const bool conv = p.why.empty() && p.anchor->op == ir::OpId::Conv2d;
  std::optional<ir::DType> dtype;
  if (!p.why.empty())
    why = p.why;
  else if (conv && !selection.cudnn)
    why = "conv2d: cuDNN not selected (--library)";
  else if (!conv && !selection.cublaslt)
    why = ir::to_string(p.anchor->op) + ": cuBLASLt not selected (--library)";
  else  // the kernel's operands include the anchor's, so this covers the anchor too
    dtype = library_dtype(node, why);
  if (!why.empty()) return std::nullopt;

  LibraryCall call;
  call.bias = p.bias >= 0;
  call.residual = p.residual >= 0;
  call.activation = p.activation;
  call.x_arg = p.x;
  call.weight_arg = p.weight;
  call.bias_arg = p.bias;
  call.residual_arg = p.residual;
  call.out_arg = static_cast<int>(node.inputs.size());  // the first (only) result
  call.math = precision;
  call.dtype = *dtype;
  std::optional<LibraryCall> made =
      conv ? conv_call(p, std::move(call), why) : matmul_call(p, std::move(call), why);
  if (made) made->descriptor += math_text(*made);
  return made;
}

}  // namespace

LibrarySelection parse_library_flag(std::string_view text) {
  const auto fail = [&](const std::string& what) -> LibrarySelection {
    throw Error("", fmt::format("--library: {}; expected auto, none, or a comma-separated list "
                                "of cublas and cudnn",
                                what));
  };
  if (text == "auto") return LibrarySelection{true, true};
  if (text == "none") return LibrarySelection{};
  LibrarySelection selection;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item(text.substr(begin, end - begin));
    if (item == "cublas" || item == "cublaslt" || item == "cublasLt") {
      selection.cublaslt = true;
    } else if (item == "cudnn") {
      selection.cudnn = true;
    } else if (item.empty()) {
      return fail(fmt::format("empty item in '{}'", text));
    } else if (item == "auto" || item == "none") {
      return fail(fmt::format("'{}' cannot be combined with other items", item));
    } else {
      return fail(fmt::format("unknown library '{}'", item));
    }
    begin = end + 1;
  }
  return selection;
}

std::string library_flag_text(const LibrarySelection& selection) {
  if (selection.cublaslt && selection.cudnn) return "cublas,cudnn";
  if (selection.cublaslt) return "cublas";
  if (selection.cudnn) return "cudnn";
  return "none";
}

std::optional<LibraryCall> select_library_call(const ir::Node& node,
                                               const LibrarySelection& selection,
                                               Precision precision, std::string* why_not) {
  std::string why;
  std::optional<LibraryCall> call = select(node, selection, precision, why);
  if (why_not != nullptr) *why_not = call ? std::string() : why;
  return call;
}

}  // namespace kiln::codegen
