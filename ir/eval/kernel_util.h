// Helpers shared by the reference kernels: the kernel table, attribute access, index
// arithmetic (unravel, broadcasting) and result construction.
//
// Kernels work on flat row-major element indices. Index helpers here are deliberately simple
// (unravel a flat index into a multi-index, then re-ravel it into another shape) because the
// interpreter is the oracle: it should be obviously right, not fast.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "ir/eval/interpreter.h"

namespace kiln::eval {

// Kernels keyed by op name; std::less<> allows lookup by string_view.
using KernelTable = std::map<ir::OpId, ReferenceKernel>;

// One registration hook per kernels_*.cpp file.
void add_elementwise_kernels(KernelTable& table);
void add_nn_kernels(KernelTable& table);  // calls add_attention_kernels
void add_attention_kernels(KernelTable& table);  // kernels_attention.cpp
void add_shape_kernels(KernelTable& table);
void add_reduce_kernels(KernelTable& table);
void add_grad_kernels(KernelTable& table);  // backward ops (kernels_grad*.cpp)
void add_optimizer_kernels(KernelTable& table);
void add_norm_train_kernels(KernelTable& table);  // kernels_norm_train.cpp
void add_nn_grad_kernels(KernelTable& table);  // kernels_nn_grad.cpp (conv2d, pools)
// kernels_index.cpp: comparisons, logic, where, is_nan/is_inf, argmax/argmin, gather_elements
void add_index_kernels(KernelTable& table);

namespace ref {

// Attribute `name` of `node` as type T. Inference has filled in every default and coerced
// every value to its schema type, so a missing or mistyped attribute is a kiln bug.
template <typename T>
const T& attr(const ir::Node& node, const std::string& name) {
  auto it = node.attrs.find(name);
  KILN_CHECK(it != node.attrs.end())
      << node.describe() << ": attribute '" << name << "' missing (was inference run?)";
  const T* value = std::get_if<T>(&it->second);
  KILN_CHECK(value != nullptr) << node.describe() << ": attribute '" << name
                               << "' has an unexpected type";
  return *value;
}

inline int64_t attr_int(const ir::Node& node, const std::string& name) {
  return attr<int64_t>(node, name);
}
inline double attr_float(const ir::Node& node, const std::string& name) {
  return attr<double>(node, name);
}
inline bool attr_bool(const ir::Node& node, const std::string& name) {
  return attr<bool>(node, name);
}
inline const std::vector<int64_t>& attr_ints(const ir::Node& node, const std::string& name) {
  return attr<std::vector<int64_t>>(node, name);
}

// Maps a possibly negative axis to [0, rank); inference has validated it already.
inline int norm_axis(int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// The declared type of result `i`: kernels produce exactly what inference promised.
inline const ir::TensorType& result_type(const ir::Node& node, size_t i = 0) {
  KILN_CHECK(i < node.results.size()) << node.describe() << " has no result " << i;
  return node.results[i]->type;
}

// Rounds `values` once to the dtype of result `i`.
inline ir::Tensor make_result(const ir::Node& node, const std::vector<double>& values,
                              size_t i = 0) {
  return ir::Tensor::from_doubles(result_type(node, i), values);
}

// Flat row-major index → multi-index in `shape`.
inline std::vector<int64_t> unravel(int64_t flat, const ir::Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// Multi-index → flat row-major index in `shape`.
inline int64_t ravel(const std::vector<int64_t>& index, const ir::Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// The flat index into an operand of shape `in_shape` that NumPy broadcasting reads for the
// output element at `out_index`: dims are aligned from the right, missing leading dims and
// size-1 dims read index 0.
inline int64_t broadcast_source(const std::vector<int64_t>& out_index, const ir::Shape& in_shape) {
  const size_t offset = out_index.size() - in_shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    const int64_t i = in_shape[d] == 1 ? 0 : out_index[d + offset];
    flat = flat * in_shape[d] + i;
  }
  return flat;
}

// "softmax_cross_entropy 'loss': <message>", located at the node: a run-time data error.
[[noreturn]] inline void node_error(const ir::Node& node, const std::string& message) {
  throw Error(node.loc.render(), node.describe() + ": " + message);
}

// A pooling window: kernel, stride ([] -> kernel), pad [top,left,bottom,right] and dilation
// (1 when the op has none, as avg_pool2d).
struct Window {
  int64_t kh, kw, sh, sw, top, left, dh, dw;
};

inline Window pool_window(const ir::Node& node) {
  const std::vector<int64_t>& kernel = attr_ints(node, "kernel");
  std::vector<int64_t> stride = attr_ints(node, "stride");
  if (stride.empty()) stride = kernel;
  const std::vector<int64_t>& pad = attr_ints(node, "pad");
  std::vector<int64_t> dilation{1, 1};
  if (node.attrs.count("dilation")) dilation = attr_ints(node, "dilation");
  return {kernel[0], kernel[1], stride[0], stride[1], pad[0], pad[1], dilation[0], dilation[1]};
}

}  // namespace ref
}  // namespace kiln::eval
