// The IR verifier: checks the invariants every stage may rely on.
#pragma once

#include "ir/graph.h"

namespace kiln::ir {

// Checks that `graph` is well formed:
//  - every value has a valid type (dims >= 1, at most 2^48 elements);
//  - names are unique; every node operand and graph output is defined, and defined before use
//    (so nodes are in topological order and there is no cycle); no value has two producers;
//  - every node's op is registered, its operand count and attributes fit the schema, its
//    attributes are complete (defaults filled in), and its result types are the inferred ones;
//  - parameters have a source, and the graph returns at least one value.
// Throws kiln::Error located at the offending node or value.
void verify(const Graph& graph);

}  // namespace kiln::ir
