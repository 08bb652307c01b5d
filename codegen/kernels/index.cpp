// Kernel emitters for the arg reductions (argmax, argmin), gather, gather_elements and
// expand_2_4.
//
//   - argmax / argmin: x viewed as [outer, dim, inner] around the axis; one thread per output
//     element walks its dim elements (stride inner) keeping the best so far. Strict comparisons
//     keep the first extremum, non-strict ones (select_last_index) the last; for floats a NaN
//     beats everything and nothing beats a NaN, as numpy.argmax and the reference. x is read
//     through load_input: fuse-elementwise may compute it in the kernel (a reduce kernel);
//   - gather: one thread per output element, x viewed as [outer, dim, inner] around the axis;
//     the same index rules as gather_elements (below);
//   - gather_elements: one thread per output element (the indices' shape) unravels its flat
//     index, reads its index (negative counts from the end) and copies x's element, so every
//     dtype moves exactly. An index out of range reads element 0 of the axis (the reference
//     reports it as an error; a kernel has no way to).
//   - gather_elements_grad, its adjoint (an embedding's gradient): a gather over the result
//     rather than a scatter over dy. One thread per result element walks dy's axis at its own
//     coordinates and adds the dy elements whose index points at it, in index order: no atomics,
//     so the sum is the same on every run (torch's scatter_add is not), and every result element
//     is written once. The cost is the result's size times dy's axis length, which suits
//     embedding tables of a few thousand rows; a sort-based kernel would be the next step.
#include <algorithm>

#include "codegen/kernels/elementwise_util.h"

namespace kiln::codegen {
namespace {

KernelSpec emit_arg_reduce(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::TensorType& x = node.inputs[0]->type;
  const int rank = static_cast<int>(x.shape.size());
  const int64_t axis_attr = attr<int64_t>(node, "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  const bool is_max = node.op == ir::OpId::Argmax;
  const bool last = attr<bool>(node, "select_last_index");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int d = axis + 1; d < rank; ++d) inner *= x.shape[d];
  const int64_t dim = x.shape[axis];
  const std::string type = index_type(ir::num_elements(x.shape));
  const std::string value_type(compute_type(x.dtype));
  const std::string& out = request.output_params[0];

  std::string better = fmt::format("v {}{} best_value", is_max ? ">" : "<", last ? "=" : "");
  if (ir::is_floating(x.dtype)) better = "best_value == best_value && (v != v || " + better + ")";

  BodyWriter w;
  w.comment(fmt::format("x is [kOuter, kDim, kInner] around axis {}; out[o, i] is the {} index "
                        "of the {} of x[o, :, i].",
                        axis, last ? "last" : "first", is_max ? "maximum" : "minimum"));
  w.line("constexpr {} kOuter = {};", type, int_literal(outer, type));
  w.line("constexpr {} kDim = {};", type, int_literal(dim, type));
  w.line("constexpr {} kInner = {};", type, int_literal(inner, type));
  w.line("constexpr {} kCount = kOuter * kInner;", type);
  open_grid_stride_loop(w, "i", type, "kCount");
  w.line("const {} first = i / kInner * kDim * kInner + i % kInner;", type);
  w.line("{} best_value = {};", value_type, load_input(request, 0, "first"));
  w.line("long long best = 0;");
  w.open("for ({} k = 1; k < kDim; ++k)", type);
  w.line("const {} v = {};", value_type, load_input(request, 0, "first + k * kInner"));
  if (ir::is_floating(x.dtype)) w.comment("NaN beats every number; nothing beats the first NaN.");
  w.open("if ({})", better);
  w.line("best_value = v;");
  w.line("best = k;");
  w.close();
  w.close();
  w.line("{}[i] = best;", out);
  w.close();
  KernelSpec spec = grid_stride_spec(outer * inner);
  spec.body = w.take();
  spec.note = "grid-stride, one output element per thread scanning its axis";
  return spec;
}

// `long long index` read from `source`, negative ones counted from the end of kAxisDim.
void emit_axis_index(BodyWriter& w, const std::string& source) {
  w.line("long long index = {};", source);
  w.line("if (index < 0) index += kAxisDim;");
  w.comment("Out of range (an error in the reference): read element 0 rather than stray memory.");
  w.line("if (index < 0 || index >= kAxisDim) index = 0;");
}

KernelSpec emit_gather_elements(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& x_shape = node.inputs[0]->type.shape;
  const ir::Shape& shape = node.inputs[1]->type.shape;
  const int rank = static_cast<int>(shape.size());
  const int64_t axis_attr = attr<int64_t>(node, "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  const int64_t count = ir::num_elements(shape);
  const std::string type = index_type(std::max(count, ir::num_elements(x_shape)));
  std::vector<int64_t> x_strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) x_strides[d] = x_strides[d + 1] * x_shape[d + 1];
  const std::string& x = request.input_params[0];
  const std::string& indices = request.input_params[1];
  const std::string& out = request.output_params[0];

  BodyWriter w;
  w.comment(fmt::format("out has the indices' shape; along axis {} it reads x at the index, "
                        "elsewhere at its own coordinate.",
                        axis));
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("constexpr int kRank = {};", rank);
  w.line("constexpr int kAxis = {};", axis);
  w.line("constexpr {} kDims[kRank] = {};", type, array_literal(shape, type));
  w.line("constexpr {} kXStrides[kRank] = {};", type, array_literal(x_strides, type));
  w.line("constexpr long long kAxisDim = {}LL;", x_shape[axis]);
  open_grid_stride_loop(w, "i", type, "kCount");
  w.line("{} rest = i;", type);
  w.line("{} offset = 0;", type);
  w.open("for (int d = kRank - 1; d >= 0; --d)");
  w.line("if (d != kAxis) offset += rest % kDims[d] * kXStrides[d];");
  w.line("rest /= kDims[d];");
  w.close();
  emit_axis_index(w, indices + "[i]");
  w.line("{}[i] = {}[offset + static_cast<{}>(index) * kXStrides[kAxis]];", out, x, type);
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "grid-stride gather, one output element per thread";
  return spec;
}

KernelSpec emit_gather(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& x_shape = node.inputs[0]->type.shape;
  const int64_t axis_attr = attr<int64_t>(node, "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + static_cast<int64_t>(x_shape.size())
                                                  : axis_attr);
  const int64_t inner = ir::num_elements(x_shape, axis + 1, x_shape.size());
  const int64_t indices = ir::num_elements(node.inputs[1]->type.shape);
  const int64_t count = ir::num_elements(node.results[0]->type.shape);
  const std::string type = index_type(std::max(count, ir::num_elements(x_shape)));

  BodyWriter w;
  w.comment(fmt::format("out is [outer, indices, inner] around axis {}: element (o, k, r) copies "
                        "x[o, index[k], r].",
                        axis));
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("constexpr {} kInner = {};", type, int_literal(inner, type));
  w.line("constexpr {} kIndices = {};", type, int_literal(indices, type));
  w.line("constexpr long long kAxisDim = {}LL;", x_shape[axis]);
  open_grid_stride_loop(w, "i", type, "kCount");
  w.line("const {} r = i % kInner;", type);
  w.line("const {} k = i / kInner % kIndices;", type);
  w.line("const {} o = i / kInner / kIndices;", type);
  emit_axis_index(w, request.input_params[1] + "[k]");
  w.line("{}[i] = {}[(o * static_cast<{}>(kAxisDim) + static_cast<{}>(index)) * kInner + r];",
         request.output_params[0], request.input_params[0], type, type);
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "grid-stride gather of x's slices, one output element per thread";
  return spec;
}

KernelSpec emit_gather_elements_grad(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& shape = node.results[0]->type.shape;
  const ir::Shape& dy_shape = node.inputs[0]->type.shape;
  const ir::DType dtype = node.results[0]->type.dtype;
  const int rank = static_cast<int>(shape.size());
  const int64_t axis_attr = attr<int64_t>(node, "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  const int64_t count = ir::num_elements(shape);
  const std::string type = index_type(std::max(count, ir::num_elements(dy_shape)));
  const std::string sum_type(compute_type(dtype));
  const std::string& indices = request.input_params[1];

  BodyWriter w;
  w.comment(fmt::format("out is shaped as the forward's x. Element j along axis {} sums, in index",
                        axis));
  w.comment("order, the dy elements of its row (the other coordinates) whose index is j.");
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("constexpr int kRank = {};", rank);
  w.line("constexpr int kAxis = {};", axis);
  w.line("constexpr {} kDims[kRank] = {};  // the result", type, array_literal(shape, type));
  w.line("constexpr {} kDyDims[kRank] = {};  // dy and the indices", type, array_literal(dy_shape, type));
  w.line("constexpr {} kDyStrides[kRank] = {};", type,
         array_literal(ir::row_major_strides(dy_shape), type));
  w.line("constexpr long long kAxisDim = {}LL;", shape[axis]);
  open_grid_stride_loop(w, "i", type, "kCount");
  w.line("{} rest = i;", type);
  w.line("{} row = 0;  // dy's offset at this element's coordinates, axis at 0", type);
  w.line("long long j = 0;");
  w.line("bool inside = true;  // dy may be smaller than the result off the axis");
  w.open("for (int d = kRank - 1; d >= 0; --d)");
  w.line("const {} coordinate = rest % kDims[d];", type);
  w.line("rest /= kDims[d];");
  w.line("if (d == kAxis) j = coordinate;");
  w.line("else if (coordinate >= kDyDims[d]) inside = false;");
  w.line("else row += coordinate * kDyStrides[d];");
  w.close();
  w.line("{} sum = 0;", sum_type);
  w.open("if (inside)");
  w.open("for ({} k = 0; k < kDyDims[kAxis]; ++k)", type);
  w.line("long long index = {}[row + k * kDyStrides[kAxis]];", indices);
  w.line("if (index < 0) index += kAxisDim;");
  w.line("if (index == j) sum += {};", load_input(request, 0, "row + k * kDyStrides[kAxis]"));
  w.close();
  w.close();
  w.line("{}[i] = {};", request.output_params[0], store(dtype, "sum"));
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "grid-stride gather over the result, summing dy along the axis in index order";
  return spec;
}

// expand_2_4: one thread per dense element reads its group's positions and copies its kept
// value, or writes zero (bits as stored: any float dtype moves exactly). A GEMM that reads the
// weight takes the expansion into its kernel (fuse-conv-bias-relu); this kernel runs where none
// does.
KernelSpec emit_expand_two_four(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::TensorType& out_type = node.results[0]->type;
  const int64_t count = ir::num_elements(out_type.shape);
  const int64_t k = count / out_type.shape[0];
  const std::string type = index_type(count);
  const std::string& kept = request.input_params[0];
  const std::string& positions = request.input_params[1];
  BodyWriter w;
  w.comment("out is [rows, kK]; kept [rows, kK / 2] holds two values per group of 4, positions");
  w.comment("[rows, kWords] their 2-bit places in the group, eight to a word, the first lowest.");
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("constexpr {} kK = {};", type, int_literal(k, type));
  w.line("constexpr {} kWords = {};", type, int_literal((k + 15) / 16, type));
  open_grid_stride_loop(w, "i", type, "kCount");
  w.line("const {} row = i / kK;", type);
  w.line("const {} k = i % kK;", type);
  w.line("const unsigned int group_bits = static_cast<unsigned int>({}[row * kWords + k / 16]) >> (k % 16 / 4 * 4);",
         positions);
  w.line("const int slot = kiln_two_four_slot(group_bits, static_cast<int>(k % 4));");
  w.line("{}[i] = slot < 0 ? {} : {}[row * (kK / 2) + k / 4 * 2 + slot];", request.output_params[0],
         store(out_type.dtype, "0.0f"), kept);
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "grid-stride expansion of a 2:4 compressed weight, one element per thread";
  return spec;
}

}  // namespace

void add_index_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::Argmax, emit_arg_reduce);
  table.emplace_back(ir::OpId::Argmin, emit_arg_reduce);
  table.emplace_back(ir::OpId::Gather, emit_gather);
  table.emplace_back(ir::OpId::GatherElements, emit_gather_elements);
  table.emplace_back(ir::OpId::GatherElementsGrad, emit_gather_elements_grad);
  table.emplace_back(ir::OpId::ExpandTwoFour, emit_expand_two_four);
}

}  // namespace kiln::codegen
