// Parameter initializers: deterministic tensors from a spec such as
// he_normal(seed = 1), so a model to be trained needs no weight file.
#pragma once

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::ir {

// The initializer kinds and, for each, the arguments it takes (all optional unless noted):
//   zeros(), ones(), constant(value: required float),
//   uniform(low = -1, high = 1, seed = 0), normal(mean = 0, std = 1, seed = 0),
//   glorot_uniform(seed = 0)  -- U(-a, a), a = sqrt(6 / (fan_in + fan_out)),
//   he_normal(seed = 0)       -- N(0, sqrt(2 / fan_in)).
// fan_in / fan_out follow PyTorch: for shape [O, I, k...], fan_in = I * prod(k),
// fan_out = O * prod(k); a rank-1 shape has fan_in = fan_out = its size.
//
// Checks the spec against its kind (unknown kind with a "did you mean", unknown or ill-typed
// argument, low > high, std < 0, the float dtype needed by random kinds) and fills in the
// defaults. Throws OpError whose `attr` names the offending argument.
void normalize_initializer(InitializerSpec& spec, const TensorType& type);

// Draws the tensor. Random kinds use the Philox stream (seed, offset 0): element i takes
// uniform word i (uniform, glorot_uniform), or a Box-Muller pair from words 2i and 2i+1
// (normal, he_normal). `spec` must be normalized.
Tensor materialize_initializer(const InitializerSpec& spec, const TensorType& type);

// The initializer kind names, for messages and docs.
const std::vector<std::string>& initializer_kinds();

}  // namespace kiln::ir
