#include "ir/dynamic_binding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ir/diagnostic.h"

namespace kiln::ir {

Tensor resize_block(const Tensor& tensor, const Shape& shape) {
  const Shape& from = tensor.type().shape;
  KILN_CHECK(from.size() == shape.size()) << "resize_block changes the rank";
  Tensor result(TensorType{tensor.type().dtype, shape});
  const size_t rank = shape.size();
  // Dims from `split` on agree in both tensors, so the copy moves runs of them at once: a run
  // is the block's rows of dim split - 1 times those trailing dims.
  size_t split = rank;
  while (split > 0 && from[split - 1] == shape[split - 1]) --split;
  if (split == 0) {
    std::memcpy(result.data(), tensor.data(), tensor.byte_size());
    return result;
  }
  const size_t element = dtype_size(tensor.type().dtype);
  int64_t inner = 1;
  for (size_t d = split; d < rank; ++d) inner *= shape[d];
  const size_t row_dim = split - 1;
  const int64_t run = std::min(from[row_dim], shape[row_dim]) * inner;
  std::vector<int64_t> index(row_dim, 0);  // over the block's dims before row_dim
  while (true) {
    int64_t src = 0, dst = 0;
    for (size_t d = 0; d < row_dim; ++d) {
      src = src * from[d] + index[d];
      dst = dst * shape[d] + index[d];
    }
    std::memcpy(result.data() + static_cast<size_t>(dst * shape[row_dim] * inner) * element,
                tensor.data() + static_cast<size_t>(src * from[row_dim] * inner) * element,
                static_cast<size_t>(run) * element);
    size_t d = row_dim;
    while (d > 0 && ++index[d - 1] == std::min(from[d - 1], shape[d - 1])) index[--d] = 0;
    if (d == 0) break;
  }
  return result;
}

namespace {

std::vector<int64_t> bounds(const std::vector<DimSymbol>& symbols) {
  std::vector<int64_t> list;
  for (const DimSymbol& symbol : symbols) list.push_back(symbol.bound);
  return list;
}

// `shape` with each dynamic dim split into [outer, size, inner], where `size` is the symbol's
// entry in `sizes`.
Shape expand(const Shape& shape, const DimMap& dims, const std::vector<int64_t>& sizes) {
  Shape expanded;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!dims[d].is_dynamic()) {
      expanded.push_back(shape[d]);
      continue;
    }
    expanded.push_back(dims[d].outer);
    expanded.push_back(sizes[static_cast<size_t>(dims[d].symbol)]);
    expanded.push_back(dims[d].inner);
  }
  return expanded;
}

// `tensor`, whose dynamic dims hold `from` (per symbol), resized to hold `to` instead: padded
// with zeros or sliced at each symbol's axis of the expanded view. `shape` is the result's.
Tensor resize_dynamic(const Tensor& tensor, const DimMap& dims, const std::vector<int64_t>& from,
                      const std::vector<int64_t>& to, const Shape& shape) {
  const TensorType& type = tensor.type();
  const Tensor view(TensorType{type.dtype, expand(type.shape, dims, from)},
                    std::vector<std::byte>(tensor.data(), tensor.data() + tensor.byte_size()));
  const Tensor resized = resize_block(view, expand(shape, dims, to));
  return Tensor(TensorType{type.dtype, shape},
                std::vector<std::byte>(resized.data(), resized.data() + resized.byte_size()));
}

}  // namespace

DynamicBinding bind_dynamic_dims(const std::vector<DimSymbol>& symbols,
                                 const std::vector<DimMap>& input_dims,
                                 const std::vector<TensorType>& types,
                                 const std::vector<std::string>& names,
                                 std::vector<Tensor>& inputs) {
  DynamicBinding binding;
  for (const DimSymbol& symbol : symbols) binding.sizes.push_back(symbol.bound);
  std::vector<std::string> bound_by(symbols.size());  // which input set each size
  for (size_t i = 0; i < inputs.size() && i < types.size(); ++i) {
    const DimMap none;
    const DimMap& dims = i < input_dims.size() ? input_dims[i] : none;
    const TensorType& want = types[i];
    const TensorType& got = inputs[i].type();
    const std::string who = "input '" + (i < names.size() ? names[i] : std::to_string(i)) + "'";
    if (!has_dynamic_dims(dims) || got == want) {
      if (got != want)
        throw Error("", fmt::format("{}: expected {}, got {}", who, want.to_string(), got.to_string()));
      for (size_t d = 0; d < dims.size(); ++d)
        if (dims[d].is_dynamic() && bound_by[dims[d].symbol].empty()) bound_by[dims[d].symbol] = who;
      continue;
    }
    const std::string expected = type_with_dims(std::string(dtype_name(want.dtype)), want.shape, dims, symbols);
    if (got.dtype != want.dtype || got.rank() != want.rank())
      throw Error("", fmt::format("{}: expected {}, got {}", who, expected, got.to_string()));
    for (size_t d = 0; d < dims.size(); ++d) {
      if (!dims[d].is_dynamic()) {
        if (got.shape[d] != want.shape[d])
          throw Error("", fmt::format("{}: expected {}, got {}: dim {} must be {}", who, expected,
                                      got.to_string(), d, want.shape[d]));
        continue;
      }
      const DimSymbol& symbol = symbols[static_cast<size_t>(dims[d].symbol)];
      const int64_t factors = dims[d].outer * dims[d].inner;
      const int64_t size = got.shape[d] / factors;
      if (got.shape[d] % factors != 0 || size < 1 || size > symbol.bound)
        throw Error("", fmt::format("{}: expected {}, got {}: dim {} is the dynamic dim '{}', which "
                                    "must be between 1 and its bound {}",
                                    who, expected, got.to_string(), d, symbol.name, symbol.bound));
      std::string& first = bound_by[static_cast<size_t>(dims[d].symbol)];
      if (!first.empty() && binding.sizes[dims[d].symbol] != size)
        throw Error("", fmt::format("{}: dim {} gives the dynamic dim '{}' size {}, but {} gave it {}",
                                    who, d, symbol.name, size, first,
                                    binding.sizes[dims[d].symbol]));
      binding.sizes[static_cast<size_t>(dims[d].symbol)] = size;
      if (first.empty()) first = who;
    }
    inputs[i] = resize_dynamic(inputs[i], dims, binding.sizes, bounds(symbols), want.shape);
    binding.padded = true;
  }
  return binding;
}

void slice_outputs(const std::vector<DimMap>& output_dims, const DynamicBinding& binding,
                   std::vector<Tensor>& outputs) {
  if (!binding.padded) return;
  for (size_t i = 0; i < outputs.size() && i < output_dims.size(); ++i) {
    const DimMap& dims = output_dims[i];
    if (!has_dynamic_dims(dims)) continue;
    Shape shape = outputs[i].type().shape;
    std::vector<int64_t> compiled;  // per symbol: its bound
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!dims[d].is_dynamic()) continue;
      const size_t symbol = static_cast<size_t>(dims[d].symbol);
      if (compiled.size() <= symbol) compiled.resize(symbol + 1, 0);
      compiled[symbol] = shape[d] / dims[d].outer / dims[d].inner;
      shape[d] = dims[d].outer * binding.sizes[symbol] * dims[d].inner;
    }
    outputs[i] = resize_dynamic(outputs[i], dims, compiled, binding.sizes, shape);
  }
}

}  // namespace kiln::ir
