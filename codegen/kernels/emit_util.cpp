#include "codegen/kernels/emit_util.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "ir/diagnostic.h"

namespace kiln::codegen {

BodyWriter& BodyWriter::line(std::string_view text) {
  lines_.push_back(Line{std::string(static_cast<size_t>(depth_) * 2, ' ') + std::string(text), ""});
  return *this;
}

BodyWriter& BodyWriter::comment(std::string_view text) { return line("// " + std::string(text)); }

BodyWriter& BodyWriter::open(std::string_view text) {
  line(text.empty() ? std::string("{") : std::string(text) + " {");  // "" opens a bare scope
  ++depth_;
  return *this;
}

BodyWriter& BodyWriter::close(std::string_view suffix) {
  KILN_CHECK(depth_ > base_depth_) << "BodyWriter: unbalanced close()";
  --depth_;
  return line("}" + std::string(suffix));
}

BodyWriter& BodyWriter::reopen(std::string_view text) {
  KILN_CHECK(depth_ > base_depth_) << "BodyWriter: reopen() outside a block";
  --depth_;
  return open("} " + std::string(text));
}

BodyWriter& BodyWriter::blank() {
  lines_.push_back(Line{"", ""});
  return *this;
}

BodyWriter& BodyWriter::lines(std::string_view block) {
  while (!block.empty()) {
    const size_t end = block.find('\n');
    const std::string_view one = block.substr(0, end);
    if (!one.empty()) line(one);
    if (end == std::string_view::npos) break;
    block.remove_prefix(end + 1);
  }
  return *this;
}

bool mentions(std::string_view code, std::string_view name) {
  const auto is_identifier_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  while (!code.empty()) {
    const size_t line_end = code.find('\n');
    std::string_view line = code.substr(0, line_end);
    line = line.substr(0, line.find("//"));
    for (size_t at = line.find(name); at != std::string_view::npos; at = line.find(name, at + 1)) {
      const bool starts = at == 0 || !is_identifier_char(line[at - 1]);
      const size_t end = at + name.size();
      const bool ends = end == line.size() || !is_identifier_char(line[end]);
      if (starts && ends) return true;
    }
    if (line_end == std::string_view::npos) break;
    code.remove_prefix(line_end + 1);
  }
  return false;
}

std::string BodyWriter::take() {
  KILN_CHECK(depth_ == base_depth_) << "BodyWriter: " << depth_ - base_depth_
                                    << " block(s) left open";
  // Drop unused declarations until none is left (one may be used only by another).
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (lines_[i].declares.empty()) continue;
      bool used = false;
      for (size_t j = 0; j < lines_.size() && !used; ++j)
        used = j != i && mentions(lines_[j].text, lines_[i].declares);
      if (used) continue;
      lines_.erase(lines_.begin() + static_cast<std::ptrdiff_t>(i));
      dropped = true;
      break;
    }
  }
  std::string text;
  for (const Line& line : lines_) text += line.text + "\n";
  lines_.clear();
  return text;
}

int axis_of(const ir::Node& node) {
  const int64_t axis = attr<int64_t>(node, "axis");
  const int rank = static_cast<int>(node.inputs[0]->type.shape.size());
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}


int64_t largest_tensor(const ir::Node& node) {
  int64_t largest = 1;
  for (const ir::Value* v : node.inputs)
    largest = std::max(largest, ir::num_elements(v->type.shape));
  for (const ir::Value* v : node.results)
    largest = std::max(largest, ir::num_elements(v->type.shape));
  return largest;
}

ir::DType stored_dtype(const KernelRequest& request, size_t index) {
  if (index < request.stored_dtypes.size() && request.stored_dtypes[index])
    return *request.stored_dtypes[index];
  return request.node.inputs[index]->type.dtype;
}

std::string load_input(const KernelRequest& request, size_t index, const std::string& subscript) {
  if (index < request.fused_inputs.size() && !request.fused_inputs[index].empty())
    return request.fused_inputs[index] + "(" + subscript + ")";
  return load(stored_dtype(request, index), request.input_params[index] + "[" + subscript + "]");
}

std::string store_result(const KernelRequest& request, size_t index, ir::DType own,
                         const std::string& expr) {
  const bool cast = index < request.result_dtypes.size() && request.result_dtypes[index];
  return store(cast ? *request.result_dtypes[index] : own, expr);
}

std::string input_address(const KernelRequest& request, size_t index, const std::string& subscript) {
  if (index < request.fused_inputs.size() && !request.fused_inputs[index].empty()) return "";
  const ir::DType dtype = stored_dtype(request, index);
  if (dtype != ir::DType::F32 && dtype != ir::DType::F16 && dtype != ir::DType::BF16) return "";
  return "&" + request.input_params[index] + "[" + subscript + "]";
}

std::string index_type(int64_t count, int64_t overshoot) {
  return count + overshoot <= std::numeric_limits<int32_t>::max() ? "int" : "long long";
}

std::string int_literal(int64_t value, std::string_view type) {
  return type == "long long" ? fmt::format("{}LL", value) : fmt::format("{}", value);
}

std::string array_literal(const std::vector<int64_t>& values, std::string_view type) {
  std::string text = "{";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + int_literal(values[i], type);
  return text + "}";
}

void open_host_body(BodyWriter& w, const std::vector<std::string>& comment,
                    std::string_view others_leave) {
  w.line("#ifndef __CUDACC__");
  for (const std::string& line : comment) w.comment(line);
  w.open("if (kiln_host_variant())");
  w.line("if ({}) return;", others_leave);
}

void close_host_body(BodyWriter& w) {
  w.line("return;");
  w.close();
  w.line("#endif");
}

void open_host_block_items(BodyWriter& w) {
  w.open("for (index_t block_first = static_cast<index_t>(blockIdx.x) * kThreads; block_first < kCount; "
         "block_first += static_cast<index_t>(gridDim.x) * kThreads)");
  w.line("const index_t block_last = block_first + kThreads < kCount ? block_first + kThreads : kCount;");
  w.open("for (index_t i = block_first; i < block_last; ++i)");
}

std::vector<std::string> emit_window_taps(BodyWriter& w, ir::DType dtype, int64_t kernel_h,
                                          int64_t kernel_w) {
  std::vector<std::string> taps;
  for (int64_t kh = 0; kh < kernel_h; ++kh)
    for (int64_t kw = 0; kw < kernel_w; ++kw) {
      taps.push_back(fmt::format("tap_{}_{}", kh, kw));
      w.line("const float {} = {};", taps.back(),
             load(dtype, fmt::format("corner[{} * kDilationH * kW + {} * kDilationW]", kh, kw)));
    }
  std::string nan, max = taps.front();
  for (const std::string& tap : taps) nan += fmt::format("{}({} != {})", nan.empty() ? "" : " | ", tap, tap);
  w.line("const bool window_nan = {};", nan);
  w.line("float window_max = {};", taps.front());
  for (size_t t = 1; t < taps.size(); ++t)
    w.line("window_max = window_max > {0} ? window_max : {0};", taps[t]);
  return taps;
}

void open_output_loop(BodyWriter& w) {
  w.line("const index_t first = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;");
  w.line("const index_t grid_threads = static_cast<index_t>(gridDim.x) * kThreads;");
  w.open("for (index_t i = first; i < kCount; i += grid_threads)");
}

void open_grid_stride_loop(BodyWriter& w, std::string_view var, std::string_view type,
                           std::string_view count_name, std::string_view start) {
  const bool wide = type != "int";
  const std::string index = wide ? "static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x"
                                 : "static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x)";
  const std::string count = wide ? "static_cast<long long>(blockDim.x) * gridDim.x"
                                 : "static_cast<int>(blockDim.x * gridDim.x)";
  std::string first = index;
  std::string stride = count;
  // Named once at the top level of the body; a loop nested deeper spells them out.
  if (w.depth() == 1) {
    if (w.first_time("grid_stride")) {
      w.line("const {} thread_index = {};", type, index);
      w.line("const {} thread_count = {};", type, count);
    }
    first = "thread_index";
    stride = "thread_count";
  }
  const std::string offset = start.empty() ? "" : std::string(start) + " + ";
  w.open("for ({} {} = {}{}; {} < {}; {} += {})", type, var, offset, first, var, count_name, var,
         stride);
}

IndexMap collapse(const IndexMap& map) {
  IndexMap out;
  out.operands = map.operands;
  for (StridedOperand& operand : out.operands) operand.strides.clear();
  for (size_t d = 0; d < map.dims.size(); ++d) {
    if (map.dims[d] == 1) continue;
    bool merge = !out.dims.empty();
    for (size_t k = 0; merge && k < map.operands.size(); ++k)
      merge = out.operands[k].strides.back() == map.operands[k].strides[d] * map.dims[d];
    if (merge) {
      out.dims.back() *= map.dims[d];
      for (size_t k = 0; k < map.operands.size(); ++k)
        out.operands[k].strides.back() = map.operands[k].strides[d];
      continue;
    }
    out.dims.push_back(map.dims[d]);
    for (size_t k = 0; k < map.operands.size(); ++k)
      out.operands[k].strides.push_back(map.operands[k].strides[d]);
  }
  if (out.dims.empty()) {
    out.dims.push_back(1);
    for (StridedOperand& operand : out.operands) operand.strides.push_back(0);
  }
  return out;
}

bool is_contiguous(const IndexMap& map, const StridedOperand& operand) {
  if (operand.base != 0) return false;
  int64_t expected = 1;
  for (size_t d = map.dims.size(); d-- > 0;) {
    if (map.dims[d] != 1 && operand.strides[d] != expected) return false;
    expected *= map.dims[d];
  }
  return true;
}

StridedOperand broadcast_operand(const std::string& name, const ir::Shape& shape,
                                 const ir::Shape& out_shape) {
  StridedOperand operand{name, 0, std::vector<int64_t>(out_shape.size(), 0)};
  const std::vector<int64_t> strides = ir::row_major_strides(shape);
  const size_t offset = out_shape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) operand.strides[d + offset] = strides[d];
  return operand;
}

std::string constant_suffix(const std::string& name) {
  std::string suffix;
  bool upper = true;
  for (char c : name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    suffix += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return suffix;
}

void emit_index_constants(BodyWriter& w, const IndexMap& map, std::string_view type) {
  bool any_mapped = false;
  for (const StridedOperand& operand : map.operands) any_mapped |= !is_contiguous(map, operand);
  if (!any_mapped) return;
  w.comment("Output dims after merging the dims every operand reads in order, and each");
  w.comment("operand's element stride per dim (0 where it is broadcast).");
  w.declare("kRank", "constexpr int kRank = {};", map.dims.size());
  w.declare("kDims", "constexpr {} kDims[kRank] = {};", type, array_literal(map.dims, type));
  for (const StridedOperand& operand : map.operands) {
    if (is_contiguous(map, operand)) continue;
    const std::string suffix = constant_suffix(operand.name);
    w.line("constexpr {} k{}Strides[kRank] = {};", type, suffix,
           array_literal(operand.strides, type));
    if (operand.base != 0)
      w.line("constexpr {} k{}Base = {};", type, suffix, int_literal(operand.base, type));
  }
}

void emit_operand_indices(BodyWriter& w, const IndexMap& map, std::string_view flat,
                          std::string_view type) {
  std::vector<const StridedOperand*> mapped;
  for (const StridedOperand& operand : map.operands)
    if (!is_contiguous(map, operand)) mapped.push_back(&operand);
  if (mapped.empty()) return;
  if (map.dims.size() == 1) {
    for (const StridedOperand* operand : mapped) {
      const std::string suffix = constant_suffix(operand->name);
      const std::string base = operand->base != 0 ? "k" + suffix + "Base + " : "";
      w.line("const {} {}_index = {}{} * k{}Strides[0];", type, operand->name, base, flat, suffix);
    }
    return;
  }
  for (const StridedOperand* operand : mapped) {
    const std::string base =
        operand->base != 0 ? "k" + constant_suffix(operand->name) + "Base" : int_literal(0, type);
    w.line("{} {}_index = {};", type, operand->name, base);
  }
  w.comment("Peel the output coordinates off the flat index, innermost dim first.");
  w.line("{} rest = {};", type, flat);
  w.open("for (int d = kRank - 1; d >= 0; --d)");
  w.line("const {} coord = rest % kDims[d];", type);
  w.line("rest /= kDims[d];");
  for (const StridedOperand* operand : mapped)
    w.line("{}_index += coord * k{}Strides[d];", operand->name, constant_suffix(operand->name));
  w.close();
}

std::string operand_index(const IndexMap& map, const StridedOperand& operand,
                          std::string_view flat) {
  return is_contiguous(map, operand) ? std::string(flat) : operand.name + "_index";
}

StridedDims collapse(const StridedDims& strided) {
  StridedDims out;
  for (size_t d = 0; d < strided.dims.size(); ++d) {
    if (strided.dims[d] == 1) continue;
    if (!out.dims.empty() && out.strides.back() == strided.strides[d] * strided.dims[d]) {
      out.dims.back() *= strided.dims[d];
      out.strides.back() = strided.strides[d];
      continue;
    }
    out.dims.push_back(strided.dims[d]);
    out.strides.push_back(strided.strides[d]);
  }
  return out;
}


void emit_strided_constants(BodyWriter& w, const std::string& prefix, const StridedDims& strided,
                            std::string_view type) {
  const size_t rank = strided.dims.size();
  if (rank == 0 || (rank == 1 && strided.strides[0] == 1)) return;
  if (rank == 1) {
    w.line("constexpr {} k{}Stride = {};", type, prefix, int_literal(strided.strides[0], type));
    return;
  }
  w.line("constexpr int k{}Rank = {};", prefix, rank);
  w.line("constexpr {} k{}Dims[k{}Rank] = {};", type, prefix, prefix,
         array_literal(strided.dims, type));
  w.line("constexpr {} k{}Strides[k{}Rank] = {};", type, prefix, prefix,
         array_literal(strided.strides, type));
}

void emit_strided_offset(BodyWriter& w, const std::string& var, const std::string& flat,
                         const std::string& prefix, const StridedDims& strided,
                         std::string_view type) {
  const size_t rank = strided.dims.size();
  if (rank == 0) {
    w.line("const {} {} = 0;", type, var);
    return;
  }
  if (rank == 1) {
    if (strided.strides[0] == 1)
      w.line("const {} {} = {};", type, var, flat);
    else
      w.line("const {} {} = {} * k{}Stride;", type, var, flat, prefix);
    return;
  }
  w.line("{} {} = 0;", type, var);
  w.line("{} {}_rest = {};", type, var, flat);
  w.open("for (int d = k{}Rank - 1; d >= 0; --d)", prefix);
  w.line("{} += {}_rest % k{}Dims[d] * k{}Strides[d];", var, var, prefix, prefix);
  w.line("{}_rest /= k{}Dims[d];", var, prefix);
  w.close();
}

KernelSpec grid_stride_spec(int64_t count) {
  KernelSpec spec;
  spec.block = Dim3{kDefaultBlock, 1, 1};
  spec.grid = Dim3{grid_stride_blocks(count), 1, 1};
  return spec;
}

}  // namespace kiln::codegen
