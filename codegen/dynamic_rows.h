// Which kernels compute only the real rows of a run with dynamic dims (codegen/kernel_emitter.h,
// DynamicRows).
//
// Every buffer holds the bound; in a run where a symbol is n < bound, a result whose first dim
// is that symbol (and whose padding therefore lies at its end) has only its first n/bound real.
// A kernel may skip the rest when
//   1. each of its results, and each value its body computes that has dynamic dims, is such a
//      prefix of one symbol (so its loops, outermost first, reach the real elements first);
//   2. its emitter honours the request (KernelSpec::dynamic_grid_axis);
//   3. no kernel that computes every row reads its results unsafely. Such a kernel reads the
//      padding of its inputs, and skipped padding is garbage, not the zeros a padded input
//      propagates. Float data read row-wise stays garbage in the padding only (what
//      infer_dynamic_dims proved of the ops); an index built from it could fault, and an
//      attention over keys along a dynamic axis multiplies masked keys' p = 0 by it (NaN). So a
//      value read that way must be clean: its producer computes every row, from clean inputs,
//      and the choice closes backwards over the graph.
// Graph outputs are sliced to the real rows, so they need nothing of their readers.
#pragma once

#include <functional>
#include <optional>
#include <unordered_map>

#include "codegen/kernel_emitter.h"
#include "ir/graph.h"

namespace kiln::codegen {

// Whether `node`'s emitter honours a request with these rows: emits it (the caller's probe).
using DynamicRowsProbe = std::function<bool(const ir::Node& node, const DynamicRows& rows)>;

// The rows each node of `graph` computes only the real part of; nodes absent compute all.
std::unordered_map<const ir::Node*, DynamicRows> choose_dynamic_rows(const ir::Graph& graph,
                                                                     const DynamicRowsProbe& honours);

}  // namespace kiln::codegen
