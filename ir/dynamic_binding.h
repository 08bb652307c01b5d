// Binding a run's inputs to a program with bounded dynamic dims (ir/dynamic_dims.h): each
// symbol's size in this run is read off the inputs, smaller inputs are padded with zeros to the
// bounds the program was compiled for, and outputs are sliced back to the run's sizes. Every
// backend does the same: the reference interpreter, the host backend and the GPU.
#pragma once

#include <string>
#include <vector>

#include "ir/dynamic_dims.h"
#include "ir/tensor.h"

namespace kiln::ir {

struct DynamicBinding {
  std::vector<int64_t> sizes;  // per symbol: its value in this run (the bound when unused)
  bool padded = false;         // some input was smaller than its bound
};

// Checks `inputs` (graph order) against `types` (the bounds): a static dim must match, a
// dynamic dim must be outer × n × inner with 1 <= n <= the bound, and every dim naming a
// symbol must give it the same n. Then pads the smaller inputs, in place, to their types.
// Throws kiln::Error naming the input, the dim and what was expected. `names` name the inputs.
DynamicBinding bind_dynamic_dims(const std::vector<DimSymbol>& symbols,
                                 const std::vector<DimMap>& input_dims,
                                 const std::vector<TensorType>& types,
                                 const std::vector<std::string>& names,
                                 std::vector<Tensor>& inputs);

// Slices each output's dynamic dims to outer × the binding's size × inner (in place), keeping
// the first n of every block of the symbol.
void slice_outputs(const std::vector<DimMap>& output_dims, const DynamicBinding& binding,
                   std::vector<Tensor>& outputs);

// Runs `run` (inputs of exactly `types` and each symbol's size in; outputs out) on `inputs` whose
// dynamic dims may be below their bounds: binds and pads them, runs, and slices the outputs back
// (`output_dims`).
// Every backend's run goes through this.
template <typename Run>
std::vector<Tensor> run_padded(const std::vector<DimSymbol>& symbols,
                               const std::vector<DimMap>& input_dims,
                               const std::vector<TensorType>& types,
                               const std::vector<std::string>& names,
                               const std::vector<DimMap>& output_dims,
                               std::vector<Tensor> inputs, Run&& run) {
  const DynamicBinding binding = bind_dynamic_dims(symbols, input_dims, types, names, inputs);
  std::vector<Tensor> outputs = run(inputs, binding.sizes);
  slice_outputs(output_dims, binding, outputs);
  return outputs;
}

// A tensor of `shape` holding the leading block of `tensor` (each dim's first shape[d]
// entries), or that block padded with zeros when `shape` is larger: a row-major block copy.
Tensor resize_block(const Tensor& tensor, const Shape& shape);

}  // namespace kiln::ir
