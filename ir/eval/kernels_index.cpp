// Reference kernels for comparisons, logic on bool, where, the float predicates (is_nan,
// is_inf), the arg reductions (argmax, argmin), gather, gather_elements and its adjoint.
//
// Selections (where, gather_elements) copy element bytes, so every dtype moves exactly; i64
// comparisons compare the integers themselves, not their (rounded) doubles.
#include <cmath>
#include <cstring>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

int64_t get_i64(const ir::Tensor& tensor, int64_t i) {
  int64_t value;
  std::memcpy(&value, tensor.data() + i * sizeof(int64_t), sizeof(int64_t));
  return value;
}

// Element `i` of an integer index tensor (i32 or i64), exactly.
int64_t get_index(const ir::Tensor& tensor, int64_t i) {
  if (tensor.dtype() == ir::DType::I64) return get_i64(tensor, i);
  return static_cast<int64_t>(tensor.get(i));
}

// For each output element of the broadcast of every operand: the flat index each operand reads.
template <typename Fn>
void for_each_broadcast(const ir::Shape& out_shape, const Inputs& in, Fn fn) {
  const int64_t count = ir::num_elements(out_shape);
  std::vector<int64_t> sources(in.size());
  for (int64_t i = 0; i < count; ++i) {
    const std::vector<int64_t> index = ref::unravel(i, out_shape);
    for (size_t k = 0; k < in.size(); ++k) sources[k] = ref::broadcast_source(index, in[k]->shape());
    fn(i, sources);
  }
}

enum class Comparison { Equal, Less, LessEqual, Greater, GreaterEqual };

template <typename T>
bool compare(Comparison kind, T a, T b) {
  switch (kind) {
    case Comparison::Equal: return a == b;
    case Comparison::Less: return a < b;
    case Comparison::LessEqual: return a <= b;
    case Comparison::Greater: return a > b;
    case Comparison::GreaterEqual: return a >= b;
  }
  return false;
}

ReferenceKernel comparison(Comparison kind) {
  return [kind](const ir::Node& node, const Inputs& in) {
    const ir::Shape& out_shape = ref::result_type(node).shape;
    std::vector<double> out(static_cast<size_t>(ir::num_elements(out_shape)));
    const bool exact_i64 = in[0]->dtype() == ir::DType::I64;
    for_each_broadcast(out_shape, in, [&](int64_t i, const std::vector<int64_t>& from) {
      out[i] = exact_i64 ? compare(kind, get_i64(*in[0], from[0]), get_i64(*in[1], from[1]))
                         : compare(kind, in[0]->get(from[0]), in[1]->get(from[1]));
    });
    return Results{ref::make_result(node, out)};
  };
}

ReferenceKernel logical(bool (*fn)(bool, bool)) {
  return [fn](const ir::Node& node, const Inputs& in) {
    const ir::Shape& out_shape = ref::result_type(node).shape;
    std::vector<double> out(static_cast<size_t>(ir::num_elements(out_shape)));
    for_each_broadcast(out_shape, in, [&](int64_t i, const std::vector<int64_t>& from) {
      out[i] = fn(in[0]->get(from[0]) != 0, in[1]->get(from[1]) != 0);
    });
    return Results{ref::make_result(node, out)};
  };
}

Results where(const ir::Node& node, const Inputs& in) {
  ir::Tensor out(ref::result_type(node));
  const size_t size = ir::dtype_size(out.dtype());
  for_each_broadcast(out.shape(), in, [&](int64_t i, const std::vector<int64_t>& from) {
    const bool take_a = in[0]->get(from[0]) != 0;
    const ir::Tensor& source = take_a ? *in[1] : *in[2];
    std::memcpy(out.data() + i * size, source.data() + (take_a ? from[1] : from[2]) * size, size);
  });
  return {std::move(out)};
}

ReferenceKernel predicate(bool (*fn)(const ir::Node&, double)) {
  return [fn](const ir::Node& node, const Inputs& in) {
    std::vector<double> values = in[0]->to_doubles();
    for (double& v : values) v = fn(node, v) ? 1.0 : 0.0;
    return Results{ref::make_result(node, values)};
  };
}

// The arg reductions: x viewed as [outer, dim, inner] around the axis. NaN beats every number
// (and the first NaN every later one), as numpy.argmax / argmin.
Results arg_reduce(const ir::Node& node, const Inputs& in, bool is_max) {
  const ir::Shape& xs = in[0]->shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(xs.size()));
  const bool last = ref::attr_bool(node, "select_last_index");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const int64_t dim = xs[axis];
  const bool exact_i64 = in[0]->dtype() == ir::DType::I64;
  auto better = [&](int64_t a, int64_t b) {  // element a beats the best so far, b
    if (exact_i64) {
      const int64_t x = get_i64(*in[0], a), y = get_i64(*in[0], b);
      return is_max ? (last ? x >= y : x > y) : (last ? x <= y : x < y);
    }
    const double x = in[0]->get(a), y = in[0]->get(b);
    if (std::isnan(y)) return false;
    if (std::isnan(x)) return true;
    return is_max ? (last ? x >= y : x > y) : (last ? x <= y : x < y);
  };
  std::vector<double> out(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < dim; ++k)
        if (better((o * dim + k) * inner + i, (o * dim + best) * inner + i)) best = k;
      out[o * inner + i] = static_cast<double>(best);
    }
  return {ref::make_result(node, out)};
}

Results gather_elements(const ir::Node& node, const Inputs& in) {
  const ir::Tensor& x = *in[0];
  const ir::Tensor& indices = *in[1];
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(x.shape().size()));
  const int64_t dim = x.shape()[axis];
  ir::Tensor out(ref::result_type(node));
  const size_t size = ir::dtype_size(out.dtype());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::vector<int64_t> position = ref::unravel(i, indices.shape());
    int64_t index = get_index(indices, i);
    if (index < -dim || index >= dim)
      ref::node_error(node, "index " + std::to_string(index) + " at element " + std::to_string(i) +
                                " is outside [-" + std::to_string(dim) + ", " +
                                std::to_string(dim) + ") on axis " + std::to_string(axis));
    position[axis] = index < 0 ? index + dim : index;
    std::memcpy(out.data() + i * size, x.data() + ref::ravel(position, x.shape()) * size, size);
  }
  return {std::move(out)};
}

// A 2:4 compressed weight's dense form (ir/ops.def): each kept value copied, bytes as they are,
// to the position its 2-bit field gives; zeros elsewhere. Positions that do not increase within
// a group are a data error (mma.sp::ordered_metadata would compute garbage from them).
Results expand_two_four(const ir::Node& node, const Inputs& in) {
  const ir::Tensor& kept = *in[0];
  const ir::Tensor& positions = *in[1];
  ir::Tensor out(ref::result_type(node));
  const int64_t rows = kept.shape()[0], half = kept.shape()[1], words = positions.shape()[1];
  const size_t size = ir::dtype_size(out.dtype());
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t c = 0; c < half; c += 2) {
      const auto word = static_cast<uint32_t>(positions.get(row * words + c / 8));
      const int64_t first = word >> (2 * (c % 8)) & 3u, second = word >> (2 * (c % 8) + 2) & 3u;
      const int64_t group = c / 2 * 4;
      if (first >= second)
        ref::node_error(node, "positions " + std::to_string(first) + " and " + std::to_string(second) +
                                  " of row " + std::to_string(row) + ", k " + std::to_string(group) + ".." +
                                  std::to_string(group + 3) + " do not increase");
      const int64_t base = row * half * 2 + group;
      std::memcpy(out.data() + (base + first) * size, kept.data() + (row * half + c) * size, size);
      std::memcpy(out.data() + (base + second) * size, kept.data() + (row * half + c + 1) * size, size);
    }
  return {std::move(out)};
}

// Copies x's slice at each index: outer x index x inner blocks of bytes, any dtype.
Results gather(const ir::Node& node, const Inputs& in) {
  const ir::Tensor& x = *in[0];
  const ir::Tensor& indices = *in[1];
  const ir::Shape& shape = x.shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(shape.size()));
  const int64_t dim = shape[axis];
  const int64_t outer = ir::num_elements(shape, 0, axis);
  const int64_t inner = ir::num_elements(shape, axis + 1, shape.size());
  const int64_t count = indices.num_elements();
  ir::Tensor out(ref::result_type(node));
  const size_t block = static_cast<size_t>(inner) * ir::dtype_size(out.dtype());
  for (int64_t k = 0; k < count; ++k) {
    const int64_t index = get_index(indices, k);
    if (index < -dim || index >= dim)
      ref::node_error(node, "index " + std::to_string(index) + " at element " + std::to_string(k) +
                                " is outside [-" + std::to_string(dim) + ", " +
                                std::to_string(dim) + ") on axis " + std::to_string(axis));
    const int64_t row = index < 0 ? index + dim : index;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.data() + (o * count + k) * block, x.data() + (o * dim + row) * block, block);
  }
  return {std::move(out)};
}

// The adjoint of gather_elements: each dy element is added where the forward read it, in the
// order of dy's elements (so a result element sums its contributions in index order, as the
// kernel does), in double.
Results gather_elements_grad(const ir::Node& node, const Inputs& in) {
  const ir::Tensor& dy = *in[0];
  const ir::Tensor& indices = *in[1];
  const ir::Shape& shape = ref::result_type(node).shape;
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(shape.size()));
  const int64_t dim = shape[axis];
  std::vector<double> out(static_cast<size_t>(ir::num_elements(shape)), 0.0);
  for (int64_t i = 0; i < dy.num_elements(); ++i) {
    std::vector<int64_t> position = ref::unravel(i, dy.shape());
    const int64_t index = get_index(indices, i);
    if (index < -dim || index >= dim)
      ref::node_error(node, "index " + std::to_string(index) + " at element " + std::to_string(i) +
                                " is outside [-" + std::to_string(dim) + ", " +
                                std::to_string(dim) + ") on axis " + std::to_string(axis));
    position[axis] = index < 0 ? index + dim : index;
    out[ref::ravel(position, shape)] += dy.get(i);
  }
  return {ref::make_result(node, out)};
}

}  // namespace

void add_index_kernels(KernelTable& table) {
  using ir::OpId;
  table[OpId::Equal] = comparison(Comparison::Equal);
  table[OpId::Less] = comparison(Comparison::Less);
  table[OpId::LessEqual] = comparison(Comparison::LessEqual);
  table[OpId::Greater] = comparison(Comparison::Greater);
  table[OpId::GreaterEqual] = comparison(Comparison::GreaterEqual);
  table[OpId::LogicalAnd] = logical([](bool a, bool b) { return a && b; });
  table[OpId::LogicalOr] = logical([](bool a, bool b) { return a || b; });
  table[OpId::LogicalXor] = logical([](bool a, bool b) { return a != b; });
  table[OpId::LogicalNot] = [](const ir::Node& node, const Inputs& in) {
    std::vector<double> values = in[0]->to_doubles();
    for (double& v : values) v = v == 0 ? 1.0 : 0.0;
    return Results{ref::make_result(node, values)};
  };
  table[OpId::Where] = where;
  table[OpId::IsNan] = predicate([](const ir::Node&, double x) { return std::isnan(x); });
  table[OpId::IsInf] = predicate([](const ir::Node& node, double x) {
    return std::isinf(x) && (x > 0 ? ref::attr_bool(node, "detect_positive")
                                   : ref::attr_bool(node, "detect_negative"));
  });
  table[OpId::Argmax] = [](const ir::Node& node, const Inputs& in) {
    return arg_reduce(node, in, true);
  };
  table[OpId::Argmin] = [](const ir::Node& node, const Inputs& in) {
    return arg_reduce(node, in, false);
  };
  table[OpId::Gather] = gather;
  table[OpId::GatherElements] = gather_elements;
  table[OpId::GatherElementsGrad] = gather_elements_grad;
  table[OpId::ExpandTwoFour] = expand_two_four;
}

}  // namespace kiln::eval
