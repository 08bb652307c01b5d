// Kernel emitter for slice_grad (ir/ops/grad_ops.cpp), the adjoint of slice: zeros of the
// forward input's shape with dy written at x[start:end:step].
//
// A gather over the result rather than a scatter over dy: one thread per result element finds
// its coordinate along each dim, and whether that coordinate is one the slice read (at or past
// the start, on the step, before the end); if every dim says yes it copies the matching dy
// element, else it writes 0. Every result element is written exactly once, so no memset
// kernel and no ordering between two kernels are needed, and writes are coalesced.
#include <algorithm>

#include "codegen/kernels/emit_util.h"

namespace kiln::codegen {
namespace {

KernelSpec emit_slice_grad(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& x_shape = node.results[0]->type.shape;
  const ir::Shape& dy_shape = node.inputs[0]->type.shape;
  const ir::DType dtype = node.results[0]->type.dtype;
  const int rank = static_cast<int>(x_shape.size());
  const auto& starts = attr<std::vector<int64_t>>(node, "starts");
  const auto& axes = attr<std::vector<int64_t>>(node, "axes");
  const auto& steps = attr<std::vector<int64_t>>(node, "steps");
  std::vector<int64_t> first(rank, 0), step(rank, 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int axis = static_cast<int>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    const int64_t dim = x_shape[axis];
    first[axis] = std::clamp<int64_t>(starts[i] < 0 ? starts[i] + dim : starts[i], 0, dim);
    step[axis] = steps[i];
  }
  const int64_t count = ir::num_elements(x_shape);
  const std::string type = index_type(count);
  const std::string element(c_type(dtype));

  BodyWriter w;
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("constexpr int kRank = {};", rank);
  w.line("constexpr {} kDims[kRank] = {};  // the result (x's shape)", type,
         array_literal(x_shape, type));
  w.line("constexpr {} kDyDims[kRank] = {};", type, array_literal(dy_shape, type));
  w.line("constexpr {} kDyStrides[kRank] = {};", type,
         array_literal(ir::row_major_strides(dy_shape), type));
  w.line("constexpr {} kFirst[kRank] = {};  // the slice's start per dim", type,
         array_literal(first, type));
  w.line("constexpr {} kStep[kRank] = {};", type, array_literal(step, type));
  w.line("const {} kZero = {};", element, store(dtype, literal(dtype, 0.0)));
  open_grid_stride_loop(w, "i", type, "kCount");
  w.comment("Walk the dims innermost first: is each coordinate one the slice read?");
  w.line("{} rest = i;", type);
  w.line("{} source = 0;", type);
  w.line("bool inside = true;");
  w.line("#pragma unroll");
  w.open("for (int d = kRank - 1; d >= 0; --d)");
  w.line("const {} offset = rest % kDims[d] - kFirst[d];", type);
  w.line("rest /= kDims[d];");
  w.line("inside = inside && offset >= 0 && offset % kStep[d] == 0 && offset / kStep[d] < kDyDims[d];");
  w.line("source += offset / kStep[d] * kDyStrides[d];");
  w.close();
  w.comment("source is only meaningful (and only read) inside the slice.");
  w.line("{}[i] = inside ? {}[source] : kZero;", request.output_params[0], request.input_params[0]);
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "gather over the result: dy inside the slice, 0 elsewhere";
  return spec;
}

}  // namespace

void add_grad_shape_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::SliceGrad, emit_slice_grad);
}

}  // namespace kiln::codegen
