// Kernel emitters for shape ops: reshape, flatten, transpose, concat, slice. They move
// elements without arithmetic (any dtype, bool included), so results are bit-exact.
//
//   - reshape, flatten: row-major data is unchanged, a 16-byte vectorized copy;
//   - transpose: the permutation is first simplified (size-1 dims dropped, input dims that stay
//     adjacent merged), so NCHW <-> NHWC becomes a batched 2-D transpose. When the two innermost
//     dims swap, a 32x32 shared-memory tile transpose keeps both the reads and the writes
//     coalesced (NVIDIA, "An Efficient Matrix Transpose in CUDA C/C++"); any other permutation
//     gathers through constexpr strides;
//   - concat: one grid-stride loop per operand inside one kernel, each copying its operand's
//     rows into their place in the output rows (reads and writes coalesced);
//   - slice: a strided gather, out[i] = x[base + sum(coord[d] * step[d] * stride[d])].
#include <algorithm>

#include "codegen/kernels/elementwise_util.h"

namespace kiln::codegen {
namespace {

constexpr int64_t kTile = 32;            // tile edge: one warp spans a tile row
constexpr int64_t kTileRowsPerPass = 8;  // block is kTile x 8 threads, 4 tile rows each
constexpr int64_t kMinTileEdge = 8;      // smaller matrices transpose by gathering

KernelSpec emit_reshape(const KernelRequest& request) {
  return emit_copy_kernel(request, ir::to_string(request.node.op) + " keeps row-major data: a copy");
}

// A gather kernel: out[i] = x[x_index(i)] for the strided map of one operand.
KernelSpec emit_gather(const KernelRequest& request, IndexMap map, const std::string& why) {
  const ir::TensorType& result = request.node.results[0]->type;
  const int64_t count = ir::num_elements(result.shape);
  const std::string type = index_type(count);
  map = collapse(map);
  if (is_contiguous(map, map.operands[0]))
    return emit_copy_kernel(request, ir::to_string(request.node.op) + " that reads x in order: a copy");
  BodyWriter w;
  w.comment(why);
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  emit_index_constants(w, map, type);
  open_grid_stride_loop(w, "i", type, "kCount");
  emit_operand_indices(w, map, "i", type);
  w.line("{}[i] = {}[{}];", request.output_params[0], request.input_params[0],
         operand_index(map, map.operands[0], "i"));
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "grid-stride gather, output order (coalesced writes), constexpr strides";
  return spec;
}

// Batched 2-D transpose of x viewed as [batch, rows, cols] into [batch, cols, rows].
KernelSpec emit_tile_transpose(const KernelRequest& request, int64_t batch, int64_t rows,
                               int64_t cols) {
  const ir::DType dtype = request.node.results[0]->type.dtype;
  const std::string element(c_type(dtype));
  const int64_t count = batch * rows * cols;
  const std::string type = index_type(count);
  const int64_t tiles = batch * ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  const std::string& x = request.input_params[0];
  const std::string& out = request.output_params[0];

  BodyWriter w;
  w.comment("x is [kBatch, kRows, kCols], out is [kBatch, kCols, kRows].");
  w.line("constexpr {} kBatch = {};", type, int_literal(batch, type));
  w.line("constexpr {} kRows = {};", type, int_literal(rows, type));
  w.line("constexpr {} kCols = {};", type, int_literal(cols, type));
  w.line("constexpr int kTile = {};", kTile);
  w.line("constexpr int kRowsPerPass = {};", kTileRowsPerPass);
  w.comment("One padding column shifts each tile row by a bank: the column reads don't conflict.");
  w.line("constexpr int kTileStride = kTile + 1;");
  w.line("constexpr {} kTileRows = (kRows + kTile - 1) / kTile;", type);
  w.line("constexpr {} kTileCols = (kCols + kTile - 1) / kTile;", type);
  w.line("constexpr {} kTiles = kBatch * kTileRows * kTileCols;", type);
  w.line("{}* tile = reinterpret_cast<{}*>(kiln_smem);", element, element);
  w.comment("Blocks stride over the tiles; the loop bound is uniform, so every thread of a block");
  w.comment("reaches both barriers in every iteration.");
  w.open("for ({} t = blockIdx.x; t < kTiles; t += gridDim.x)", type);
  w.line("const {} plane = t / (kTileRows * kTileCols);", type);
  w.line("const {} first_row = (t / kTileCols) % kTileRows * kTile;", type);
  w.line("const {} first_col = t % kTileCols * kTile;", type);
  w.line("const {}* in_plane = {} + plane * kRows * kCols;", element, x);
  w.line("{}* out_plane = {} + plane * kRows * kCols;", element, out);
  w.comment("Load: a warp reads kTile consecutive elements of one input row.");
  w.open("for (int k = threadIdx.y; k < kTile; k += kRowsPerPass)");
  w.line("const {} row = first_row + k;", type);
  w.line("const {} col = first_col + threadIdx.x;", type);
  w.open("if (row < kRows && col < kCols)");
  w.line("tile[k * kTileStride + threadIdx.x] = in_plane[row * kCols + col];");
  w.close();
  w.close();
  w.line("__syncthreads();");
  w.comment("Store: a warp writes kTile consecutive elements of one output row (an input column).");
  w.open("for (int k = threadIdx.y; k < kTile; k += kRowsPerPass)");
  w.line("const {} col = first_col + k;", type);
  w.line("const {} row = first_row + threadIdx.x;", type);
  w.open("if (row < kRows && col < kCols)");
  w.line("out_plane[col * kRows + row] = tile[threadIdx.x * kTileStride + k];");
  w.close();
  w.close();
  w.comment("The next tile overwrites the shared tile: wait until every thread has read it.");
  w.line("__syncthreads();");
  w.close();

  KernelSpec spec;
  spec.block = Dim3{static_cast<uint32_t>(kTile), static_cast<uint32_t>(kTileRowsPerPass), 1};
  spec.grid = Dim3{grid_stride_blocks(tiles, 1), 1, 1};
  spec.shared_bytes = static_cast<uint32_t>(kTile * (kTile + 1) * ir::dtype_size(dtype));
  spec.uses_barriers = true;
  spec.body = w.take();
  spec.note =
      "32x32 shared-memory tile transpose (padded against bank conflicts), "
      "coalesced reads and writes";
  return spec;
}

KernelSpec emit_transpose(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& in_shape = node.inputs[0]->type.shape;
  const ir::Shape& out_shape = node.results[0]->type.shape;
  const int rank = static_cast<int>(in_shape.size());
  std::vector<int64_t> perm = attr<std::vector<int64_t>>(node, "perm");
  if (perm.empty())
    for (int d = rank - 1; d >= 0; --d) perm.push_back(d);

  // Output dim d reads input dim perm[d]: its stride in the loop over the output.
  const std::vector<int64_t> in_strides = ir::row_major_strides(in_shape);
  IndexMap map;
  map.dims = out_shape;
  map.operands.push_back(StridedOperand{request.input_params[0], 0, {}});
  for (int d = 0; d < rank; ++d) map.operands[0].strides.push_back(in_strides[perm[d]]);
  const IndexMap simple = collapse(map);
  if (is_contiguous(simple, simple.operands[0]))
    return emit_copy_kernel(request, "this transpose only moves size-1 dims: a copy");

  // After collapsing, x viewed as [batch, rows, cols] (strides rows*cols, cols, 1) read in
  // output order [batch, cols, rows] has output strides {rows*cols,} 1, cols.
  const auto& dims = simple.dims;
  const auto& strides = simple.operands[0].strides;
  const size_t n = dims.size();
  const bool batched = n == 3 && strides[0] == dims[1] * dims[2];
  const bool swaps_inner =
      (n == 2 || batched) && strides[n - 2] == 1 && strides[n - 1] == dims[n - 2];
  // A tile edge of a few elements would idle most of the block: gather instead.
  const bool wide_enough = swaps_inner && std::min(dims[n - 1], dims[n - 2]) >= kMinTileEdge;
  if (wide_enough)
    return emit_tile_transpose(request, n == 3 ? dims[0] : 1, dims[n - 1], dims[n - 2]);
  return emit_gather(request, map, "transpose: output dim d reads input dim perm[d]");
}

KernelSpec emit_concat(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& out_shape = node.results[0]->type.shape;
  const int axis = axis_of(node);  // operands and result have the same rank
  const int64_t outer = ir::num_elements(out_shape, 0, axis);
  const int64_t inner = ir::num_elements(out_shape, axis + 1, out_shape.size());
  const int64_t count = ir::num_elements(out_shape);
  const std::string type = index_type(count);
  const std::string& out = request.output_params[0];

  BodyWriter w;
  w.comment("Viewed as [kOuter, row]: each output row is the operands' rows one after another.");
  w.line("constexpr {} kOuter = {};", type, int_literal(outer, type));
  w.declare("kOutRow", "constexpr {} kOutRow = {};", type,
            int_literal(out_shape[axis] * inner, type));
  int64_t offset = 0;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const std::string& x = request.input_params[k];
    const std::string suffix = constant_suffix(x);
    const int64_t row = node.inputs[k]->type.shape[axis] * inner;
    w.comment(fmt::format("Operand {}: rows of {} elements at offset {} of each output row.", k,
                          row, offset));
    w.line("constexpr {} k{}Row = {};", type, suffix, int_literal(row, type));
    w.line("constexpr {} k{}Offset = {};", type, suffix, int_literal(offset, type));
    open_grid_stride_loop(w, "i", type, "kOuter * k" + suffix + "Row");
    if (outer == 1) {
      w.line("{}[k{}Offset + i] = {}[i];", out, suffix, x);
    } else {
      w.line("const {} row = i / k{}Row;", type, suffix);
      w.line("const {} col = i - row * k{}Row;", type, suffix);
      w.line("{}[row * kOutRow + k{}Offset + col] = {}[i];", out, suffix, x);
    }
    w.close();
    offset += row;
  }
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "one grid-stride copy loop per operand in one kernel, coalesced";
  return spec;
}

// ONNX slice bounds: a negative index adds the dim, then it is clamped to [0, dim].
int64_t clamp_index(int64_t index, int64_t dim) {
  if (index < -dim) return 0;
  return std::min(index < 0 ? index + dim : index, dim);
}

KernelSpec emit_slice(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& in_shape = node.inputs[0]->type.shape;
  const int rank = static_cast<int>(in_shape.size());
  const std::vector<int64_t>& starts = attr<std::vector<int64_t>>(node, "starts");
  const std::vector<int64_t>& axes = attr<std::vector<int64_t>>(node, "axes");
  const std::vector<int64_t>& steps = attr<std::vector<int64_t>>(node, "steps");
  std::vector<int64_t> first(rank, 0);
  std::vector<int64_t> step(rank, 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis_attr = axes.empty() ? static_cast<int64_t>(i) : axes[i];
    const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
    first[axis] = clamp_index(starts[i], in_shape[axis]);
    step[axis] = steps.empty() ? 1 : steps[i];
  }
  const std::vector<int64_t> in_strides = ir::row_major_strides(in_shape);
  IndexMap map;
  map.dims = node.results[0]->type.shape;
  map.operands.push_back(StridedOperand{request.input_params[0], 0, {}});
  for (int d = 0; d < rank; ++d) {
    map.operands[0].base += first[d] * in_strides[d];
    map.operands[0].strides.push_back(step[d] * in_strides[d]);
  }
  return emit_gather(request, map, "slice: start offset kXBase, per-dim stride step * stride");
}

}  // namespace

void add_shape_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::Reshape, emit_reshape);
  table.emplace_back(ir::OpId::Flatten, emit_reshape);
  table.emplace_back(ir::OpId::Transpose, emit_transpose);
  table.emplace_back(ir::OpId::Concat, emit_concat);
  table.emplace_back(ir::OpId::Slice, emit_slice);
}

}  // namespace kiln::codegen
