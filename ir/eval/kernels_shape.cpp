// Reference kernels for shape ops: reshape, flatten, transpose, concat, slice. They move
// elements without arithmetic, so values pass through exactly (the dtype never changes).
#include <algorithm>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// Row-major data is unchanged by a reshape; only the type differs.
Results reshape(const ir::Node& node, const Inputs& in) {
  return {ir::Tensor(ref::result_type(node), in[0]->bytes())};
}

// Output dim d reads input dim perm[d] ([] means reversed axes).
Results transpose(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const ir::Shape& os = ref::result_type(node).shape;
  const int rank = static_cast<int>(xs.size());
  std::vector<int64_t> perm = ref::attr_ints(node, "perm");
  if (perm.empty())
    for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
  const std::vector<double> x = in[0]->to_doubles();
  std::vector<double> out(x.size());
  std::vector<int64_t> source(rank);
  for (size_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> index = ref::unravel(static_cast<int64_t>(i), os);
    for (int d = 0; d < rank; ++d) source[perm[d]] = index[d];
    out[i] = x[ref::ravel(source, xs)];
  }
  return {ref::make_result(node, out)};
}

// Viewed as [outer, size_along_axis * inner], the output row o is the inputs' rows o, one
// after the other.
Results concat(const ir::Node& node, const Inputs& in) {
  const ir::Shape& os = ref::result_type(node).shape;
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(os.size()));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= os[d];
  for (size_t d = axis + 1; d < os.size(); ++d) inner *= os[d];
  std::vector<std::vector<double>> parts;
  for (const ir::Tensor* t : in) parts.push_back(t->to_doubles());
  std::vector<double> out;
  out.reserve(static_cast<size_t>(ir::num_elements(os)));
  for (int64_t o = 0; o < outer; ++o)
    for (size_t t = 0; t < in.size(); ++t) {
      const int64_t row = in[t]->shape()[axis] * inner;
      out.insert(out.end(), parts[t].begin() + o * row, parts[t].begin() + (o + 1) * row);
    }
  return {ref::make_result(node, out)};
}

// ONNX and Python slice bounds: a negative index adds the dim, then it is clamped to [0, dim].
int64_t clamp_index(int64_t index, int64_t dim) {
  // Compare before adding so that an index near INT64_MIN cannot overflow.
  if (index < -dim) return 0;
  return std::min(index < 0 ? index + dim : index, dim);
}

// x[start:end:step] on the listed axes (steps are >= 1).
Results slice(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const ir::Shape& os = ref::result_type(node).shape;
  const int rank = static_cast<int>(xs.size());
  const std::vector<int64_t>& starts = ref::attr_ints(node, "starts");
  const std::vector<int64_t>& ends = ref::attr_ints(node, "ends");
  const std::vector<int64_t>& axes_attr = ref::attr_ints(node, "axes");
  const std::vector<int64_t>& steps_attr = ref::attr_ints(node, "steps");

  std::vector<int64_t> first(rank, 0), step(rank, 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int axis =
        ref::norm_axis(axes_attr.empty() ? static_cast<int64_t>(i) : axes_attr[i], rank);
    first[axis] = clamp_index(starts[i], xs[axis]);
    step[axis] = steps_attr.empty() ? 1 : steps_attr[i];
    // Recount the extent from the attributes: a disagreement is an inference bug.
    const int64_t end = clamp_index(ends[i], xs[axis]);
    const int64_t count = end > first[axis] ? (end - first[axis] + step[axis] - 1) / step[axis] : 0;
    KILN_CHECK(count == os[axis]) << node.describe() << ": slice of axis " << axis << " has "
                                  << count << " elements, inference said " << os[axis];
  }
  const std::vector<double> x = in[0]->to_doubles();
  std::vector<double> out(static_cast<size_t>(ir::num_elements(os)));
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<int64_t> index = ref::unravel(static_cast<int64_t>(i), os);
    for (int d = 0; d < rank; ++d) index[d] = first[d] + index[d] * step[d];
    out[i] = x[ref::ravel(index, xs)];
  }
  return {ref::make_result(node, out)};
}

}  // namespace

void add_shape_kernels(KernelTable& table) {
  table[ir::OpId::Reshape] = reshape;
  table[ir::OpId::Flatten] = reshape;  // flatten is a reshape to [prod(dims[:axis]), prod(dims[axis:])]
  table[ir::OpId::Transpose] = transpose;
  table[ir::OpId::Concat] = concat;
  table[ir::OpId::Slice] = slice;
}

}  // namespace kiln::eval
