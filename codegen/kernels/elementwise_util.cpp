#include "codegen/kernels/elementwise_util.h"

#include "ir/diagnostic.h"

namespace kiln::codegen {
namespace {

// Elements of one float4: the vector loop's width.
constexpr int64_t kVectorWidth = 4;
constexpr int64_t kVectorBytes = 16;

void emit_apply_lambda(BodyWriter& w, const ir::Node& node, const ElementFn& fn) {
  const size_t arity = node.inputs.size();
  KILN_CHECK(arity >= 1 && arity <= 3) << node.describe() << ": map kernels take 1 to 3 operands";
  std::string params;
  for (size_t i = 0; i < arity; ++i)
    params += fmt::format("{}{} {}", i ? ", " : "", compute_type(node.inputs[i]->type.dtype),
                          element_param_name(arity, i));
  w.comment(fn.summary);
  w.open("const auto apply = []({}) -> {}", params, compute_type(node.results[0]->type.dtype));
  for (const std::string& statement : fn.statements) w.line(statement);
  w.close(";");
}

// The float4 loop: every operand and the result are f32 and read in order.
void emit_vector_loop(BodyWriter& w, const KernelRequest& request, std::string_view type) {
  w.comment("Four elements per thread and iteration: one 16-byte load per operand, one store.");
  w.line("{} {} kVectors = kCount / kVectorWidth;", count_qualifier(request), type);
  for (const std::string& name : request.input_params)
    w.line("const float4* {}4 = reinterpret_cast<const float4*>({});", name, name);
  w.line("float4* out4 = reinterpret_cast<float4*>({});", request.output_params[0]);
  open_grid_stride_loop(w, "v", type, "kVectors");
  for (const std::string& name : request.input_params)
    w.line("const float4 {}_v = {}4[v];", name, name);
  w.line("float4 result;");
  for (const char* lane : {"x", "y", "z", "w"}) {
    std::string args;
    for (size_t i = 0; i < request.input_params.size(); ++i)
      args += fmt::format("{}{}_v.{}", i ? ", " : "", request.input_params[i], lane);
    w.line("result.{} = apply({});", lane, args);
  }
  w.line("out4[v] = result;");
  w.close();
}

}  // namespace

const char* element_param_name(size_t arity, size_t i) {
  static const char* const kUnary[] = {"value"};
  static const char* const kBinary[] = {"lhs", "rhs"};
  static const char* const kTernary[] = {"cond", "lhs", "rhs"};
  KILN_CHECK(arity >= 1 && arity <= 3 && i < arity) << "element functions take 1 to 3 operands";
  return arity == 1 ? kUnary[i] : arity == 2 ? kBinary[i] : kTernary[i];
}

KernelSpec emit_map_kernel(const KernelRequest& request, const ElementFn& fn) {
  const ir::Node& node = request.node;
  const ir::TensorType& result = node.results[0]->type;
  const int64_t count = ir::num_elements(result.shape);
  const std::string type = index_type(count);

  IndexMap map;
  map.dims = result.shape;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    map.operands.push_back(
        broadcast_operand(request.input_params[i], node.inputs[i]->type.shape, result.shape));
  map = collapse(map);
  bool broadcast = false;
  bool all_f32 = result.dtype == ir::DType::F32;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    broadcast |= !is_contiguous(map, map.operands[i]);
    all_f32 &= node.inputs[i]->type.dtype == ir::DType::F32;
  }
  const bool vectorize = all_f32 && !broadcast && count >= kVectorWidth;

  BodyWriter w;
  emit_apply_lambda(w, node, fn);
  w.line(dynamic_count(request.dynamic_rows, "kCount", type, count));
  emit_index_constants(w, map, type);
  std::string start;
  if (vectorize) {
    w.line("constexpr {} kVectorWidth = {};", type, kVectorWidth);
    emit_vector_loop(w, request, type);
    if (count % kVectorWidth == 0 && !request.dynamic_rows) {
      w.comment("kCount is a multiple of kVectorWidth: no scalar tail.");
      KernelSpec spec = grid_stride_spec(count / kVectorWidth);
      spec.body = w.take();
      spec.note = "grid-stride map, float4 loads and stores";
      return spec;
    }
    w.comment("The last kCount % kVectorWidth elements, one per thread.");
    start = "kVectors * kVectorWidth";
  } else if (broadcast) {
    w.comment("One element per thread and iteration; broadcast operands gather by stride.");
  } else {
    w.comment("One element per thread and iteration.");
  }
  open_grid_stride_loop(w, "i", type, "kCount", start);
  emit_operand_indices(w, map, "i", type);
  std::string args;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const std::string element =
        request.input_params[k] + "[" + operand_index(map, map.operands[k], "i") + "]";
    args += (k ? ", " : "") + load(node.inputs[k]->type.dtype, element);
  }
  w.line("{}[i] = {};", request.output_params[0], store(result.dtype, "apply(" + args + ")"));
  w.close();

  KernelSpec spec = grid_stride_spec(vectorize ? count / kVectorWidth + 1 : count);
  spec.body = w.take();
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  spec.note = vectorize   ? "grid-stride map, float4 loads and stores, scalar tail"
              : broadcast ? "grid-stride map with NumPy broadcasting (constexpr strides)"
                          : "grid-stride map, one element per thread";
  return spec;
}

KernelSpec emit_copy_kernel(const KernelRequest& request, const std::string& why) {
  const ir::Node& node = request.node;
  const ir::TensorType& result = node.results[0]->type;
  const int64_t count = ir::num_elements(result.shape);
  const int64_t element_bytes = static_cast<int64_t>(ir::dtype_size(result.dtype));
  const int64_t per_vector = kVectorBytes / element_bytes;
  const int64_t vectors = count / per_vector;
  const std::string type = index_type(count);
  const std::string& x = request.input_params[0];
  const std::string& out = request.output_params[0];

  BodyWriter w;
  w.comment(why);
  w.line(dynamic_count(request.dynamic_rows, "kCount", type, count));
  w.comment("16 bytes per move: float4 copies the bits of any element type unchanged.");
  w.line("constexpr {} kPerVector = {};", type, per_vector);
  w.line("{} {} kVectors = kCount / kPerVector;", count_qualifier(request), type);
  w.line("const float4* x4 = reinterpret_cast<const float4*>({});", x);
  w.line("float4* out4 = reinterpret_cast<float4*>({});", out);
  open_grid_stride_loop(w, "v", type, "kVectors");
  w.line("out4[v] = x4[v];");
  w.close();
  if (count % per_vector == 0 && !request.dynamic_rows) {
    w.comment("kCount is a multiple of kPerVector: no scalar tail.");
  } else {
    w.comment("The last kCount % kPerVector elements, one per thread.");
    open_grid_stride_loop(w, "i", type, "kCount", "kVectors * kPerVector");
    w.line("{}[i] = {}[i];", out, x);
    w.close();
  }
  KernelSpec spec = grid_stride_spec(std::max<int64_t>(vectors, 1));
  spec.body = w.take();
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  spec.note = "bit copy, 16 bytes per thread and iteration";
  return spec;
}

}  // namespace kiln::codegen
