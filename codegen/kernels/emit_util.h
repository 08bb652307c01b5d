// Helpers shared by the kernel emitters under codegen/kernels/: a writer for kernel bodies,
// attribute access, literals, index types, grid-stride loops and strided index maps.
//
// An IndexMap describes an injective or broadcasting kernel: it walks the elements of the
// output in row-major order and, for each operand, reads element `base + sum(coord[d] *
// stride[d])`. Broadcasting (stride 0), transposes (permuted strides) and slices (scaled
// strides, a base offset) are all such maps. Collapsing merges adjacent output dims whose
// strides chain in every operand, so a [64,128] + [128] add indexes in 2-D and a contiguous
// operand in 1-D, whatever the rank written in the IR.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "codegen/kernel_emitter.h"
#include "ir/diagnostic.h"

namespace kiln::codegen {

// Builds a kernel body one statement a line, indented two spaces per level (the body starts at
// one level, inside the kernel's braces).
class BodyWriter {
 public:
  // `depth` 0 for a fragment that another writer places with lines() (a GEMM's batch_setup).
  explicit BodyWriter(int depth = 1) : base_depth_(depth), depth_(depth) {}

  BodyWriter& line(std::string_view text);
  template <typename... Args>
  BodyWriter& line(fmt::format_string<Args...> format, Args&&... args) {
    return line(std::string_view(fmt::format(format, std::forward<Args>(args)...)));
  }
  BodyWriter& comment(std::string_view text);  // "// text", wrapped by the caller
  BodyWriter& open(std::string_view text);     // "text {", then one level deeper
  template <typename... Args>
  BodyWriter& open(fmt::format_string<Args...> format, Args&&... args) {
    return open(std::string_view(fmt::format(format, std::forward<Args>(args)...)));
  }
  // "}" + suffix (";" after a lambda or struct), one level up.
  BodyWriter& close(std::string_view suffix = "");
  // "} text {": closes a block and opens the next one (else, else if) at the same level.
  BodyWriter& reopen(std::string_view text);
  BodyWriter& blank();
  // A block of lines (a hook written by another emitter, such as a GEMM epilogue), each at the
  // current indent plus its own; empty lines are dropped.
  BodyWriter& lines(std::string_view block);
  // A declaration of `name` that take() drops when nothing else mentions `name` (shared
  // preambles and templates declare lane, warp, kFullMask, shape constants, ... whether or not
  // the kernel uses them, and an unused local draws compiler warnings, NVRTC's included).
  template <typename... Args>
  BodyWriter& declare(std::string_view name, fmt::format_string<Args...> format, Args&&... args) {
    line(std::string_view(fmt::format(format, std::forward<Args>(args)...)));
    lines_.back().declares = name;
    return *this;
  }
  // The text, without the declarations nobody uses; the writer is empty afterwards.
  std::string take();
  int depth() const { return depth_; }
  // True the first time it is asked about `key`: for declarations a body needs once.
  bool first_time(const std::string& key) {
    for (const std::string& seen : once_)
      if (seen == key) return false;
    once_.push_back(key);
    return true;
  }

 private:
  struct Line {
    std::string text;      // indented, no newline
    std::string declares;  // the name a declare() line introduces
  };
  std::vector<Line> lines_;
  std::vector<std::string> once_;
  int base_depth_ = 1;  // where blocks must be closed again by take()
  int depth_ = 1;
};

// Whether `code` (one or more lines; // comments ignored) uses the identifier `name`.
bool mentions(std::string_view code, std::string_view name);

// Attributes as inference left them: complete and of the schema's type, so a miss is a bug.
template <typename T>
const T& attr(const ir::Node& node, const std::string& name) {
  const auto it = node.attrs.find(name);
  KILN_CHECK(it != node.attrs.end()) << node.describe() << ": attribute '" << name << "' missing";
  const T* value = std::get_if<T>(&it->second);
  KILN_CHECK(value != nullptr) << node.describe() << ": attribute '" << name << "' mistyped";
  return *value;
}

// The node's `axis` attribute counted from the front of its first operand's dims (-1: the last).
int axis_of(const ir::Node& node);

// The element count of the largest operand or result of `node`.
int64_t largest_tensor(const ir::Node& node);

// Element `subscript` of input `index` (its kernel parameter), converted to its compute type;
// or, when a fused kernel computes that input in registers (KernelRequest::fused_inputs), the
// call computing it.
// The dtype operand `index`'s buffer holds (KernelRequest::stored_dtypes, else the operand's).
ir::DType stored_dtype(const KernelRequest& request, size_t index);
std::string load_input(const KernelRequest& request, size_t index, const std::string& subscript);
// `expr` (a float) converted for result `index`'s buffer: to KernelRequest::result_dtypes'
// dtype where the kernel absorbed a cast of the result, else to `own` (the emitter's).
std::string store_result(const KernelRequest& request, size_t index, ir::DType own,
                         const std::string& expr);
// `&in_x[subscript]`: the address of that element, when operand `index` is read from a kernel
// parameter as it is, an f32 or a bf16/f16 that is only widened (for cp.async and vector
// loads); empty when it is fused or of another type.
std::string input_address(const KernelRequest& request, size_t index, const std::string& subscript);

// Threads of a warp, on every GPU kiln targets.
inline constexpr int64_t kWarpSize = 32;

// Largest number of threads a grid-stride loop adds to its index at once: grid_stride_blocks
// caps the grid, and blocks have at most 1024 threads.
inline constexpr int64_t kMaxGridThreads = int64_t{132} * 8 * 1024;

// "int" when every index up to `count` plus `overshoot` fits in 32 bits, else "long long".
// 32-bit index arithmetic is cheaper on GPUs. `overshoot` is how far past the end a thread may
// index before its bounds check: one grid stride unless the caller knows better.
std::string index_type(int64_t count, int64_t overshoot = kMaxGridThreads);
// index_type for the kernels of nn.cpp and pool_norm.cpp, whose threads may compute offsets up
// to a whole operand past the end before their bounds check (a GEMM tile's overhang: at most one
// more image or row block): "int" while twice `largest`, the element count of the biggest
// operand or result, stays within 2^31.
inline std::string index_type_with_overhang(int64_t largest) {
  return index_type(largest, largest - 1);
}
// An integer literal of `type`: "42" for int, "42LL" for long long.
std::string int_literal(int64_t value, std::string_view type);
// "{1, 2, 3}" with `type`'s literal suffix.
std::string array_literal(const std::vector<int64_t>& values, std::string_view type);

// A kernel's host-specific body (docs/codegen.md, "The host backend"): open_host_body opens
// `#ifndef __CUDACC__` and `if (kiln_host_variant())` with `comment` (its lines, saying what
// runs and that it equals the CUDA body below), and makes every thread but the one that
// `others_leave` excludes ("threadIdx.x != 0") return; close_host_body returns and closes them.
void open_host_body(BodyWriter& w, const std::vector<std::string>& comment,
                    std::string_view others_leave = "threadIdx.x != 0");
void close_host_body(BodyWriter& w);

// For a host body of a grid-stride kernel over kCount items (index type index_t, kThreads per
// block): opens the loops over the items the block's CUDA threads would take, in order, as
// `i`; close both (w.close() twice).
void open_host_block_items(BodyWriter& w);

// For a max pool's host body: the taps of a window that lies inside x, read from `corner`
// (`const float tap_<kh>_<kw>`, kDilationH/W apart), `window_nan` (one of them is NaN) and
// `window_max`, their largest as a chain of `a > b ? a : b` (one maxss each on x86: kiln_max's
// selects become branches on the data). Without NaNs the chain's result is kiln_max's chain's,
// the last of the largest taps, bit for bit; with one, callers take the CUDA body's path.
// Returns the taps' names in window order.
std::vector<std::string> emit_window_taps(BodyWriter& w, ir::DType dtype, int64_t kernel_h,
                                          int64_t kernel_w);

// The first line of a grid-stride loop over [start, count_name):
//   for (int i = thread_index; i < kCount; i += thread_count)
// declaring thread_index (this thread's rank in the grid) and thread_count (threads in the
// grid) before the first loop of the body. `var` is the loop variable of type `type`; `start`
// an offset added to thread_index (e.g. "kVectors * kVectorWidth").
void open_grid_stride_loop(BodyWriter& w, std::string_view var, std::string_view type,
                           std::string_view count_name, std::string_view start = "");

// The loop of a kernel with one thread per output, grid-stride: `i` runs over [0, kCount) in
// steps of the grid's threads (index_t, kThreads and kCount declared by the body before it).
// Unlike open_grid_stride_loop, it spells the pooling, norm and gradient kernels' index_t and
// kThreads.
void open_output_loop(BodyWriter& w);

// One operand of an IndexMap: its pointer name, base offset and a stride per output dim.
struct StridedOperand {
  std::string name;
  int64_t base = 0;
  std::vector<int64_t> strides;
};

struct IndexMap {
  std::vector<int64_t> dims;  // the output's dims (the loop space)
  std::vector<StridedOperand> operands;
};

// Drops size-1 dims and merges dim d with d+1 when, in every operand, stride[d] ==
// stride[d+1] * dims[d+1]. A scalar loop space keeps one dim of size 1.
IndexMap collapse(const IndexMap& map);
// True when `operand` reads the loop space in order: base 0 and row-major strides.
bool is_contiguous(const IndexMap& map, const StridedOperand& operand);

// An operand of shape `shape` read with NumPy broadcasting at every element of `out_shape`
// (dims aligned from the right; size-1 and missing dims get stride 0).
StridedOperand broadcast_operand(const std::string& name, const ir::Shape& shape,
                                 const ir::Shape& out_shape);

// Emits statements computing `<name>_index` for each operand that does not read in order, from
// the flat output index `flat`, with `type` for index arithmetic.
void emit_operand_indices(BodyWriter& w, const IndexMap& map, std::string_view flat,
                          std::string_view type);
// Emits the constants emit_operand_indices needs (kRank, kDims, k<Name>Strides, k<Name>Base);
// call once before the loop.
void emit_index_constants(BodyWriter& w, const IndexMap& map, std::string_view type);
// The index expression of `operand` at flat output index `flat`: `flat` itself when the
// operand reads in order, else "<name>_index".
std::string operand_index(const IndexMap& map, const StridedOperand& operand,
                          std::string_view flat);

// "kX" style constant name for an operand pointer name: "a" → "A", "x0" → "X0".
std::string constant_suffix(const std::string& name);

// Dims with a stride each, outermost first: where a flat index over `dims` lands in a buffer.
struct StridedDims {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
};

// Drops size-1 dims and merges a dim into the next when stride[d] == stride[d+1] * dims[d+1];
// the result may have no dims (a single element at offset 0).
StridedDims collapse(const StridedDims& strided);

// Constants k<Prefix>Dims / k<Prefix>Strides (rank >= 2) or k<Prefix>Stride (rank 1) for
// emit_strided_offset; nothing for rank 0 or a single stride of 1.
void emit_strided_constants(BodyWriter& w, const std::string& prefix, const StridedDims& strided,
                            std::string_view type);
// `const <type> <var> = <offset of flat index `flat`>;`
void emit_strided_offset(BodyWriter& w, const std::string& var, const std::string& flat,
                         const std::string& prefix, const StridedDims& strided,
                         std::string_view type);

// Launch configuration for a grid-stride loop over `count` items with kDefaultBlock threads.
KernelSpec grid_stride_spec(int64_t count);

}  // namespace kiln::codegen
