// The textual form of the IR. It parses back (ir/parser.h): print → parse → print is a fixed
// point. Example:
//
//   graph @mlp(%x: f32[8,784])
//       params(%fc1.weight: f32[128,784] = glorot_uniform(seed = 1),
//              %fc1.bias: f32[128] = zeros(),
//              %scale: f32[2] = dense<[0.5,2.0]>,
//              %fc2.weight: f32[10,128] = file("/abs/mlp.safetensors", "fc2.weight"))
//       -> (f32[8,10]) {
//     %fc1 = dense(%x, %fc1.weight, %fc1.bias) : f32[8,128] loc("fc1")
//     %act = gelu(%fc1) {approximate = "tanh"} : f32[8,128] loc("act")
//     return %act
//   }
//
// When the graph carries a memory plan (ir/memory_plan.h), a comment line with its figures comes
// before the graph and each planned node result's arena slice (offset, +bytes) ends its line:
//
//   // memory plan: arena 256 B, naive 256 B, lower bound 256 B, planned/lower bound 1.00
//   graph @g(%x: f32[1,64]) ...
//     %y = relu(%x) : f32[1,64] loc("act")  // arena[0:+256]
//
// Comments are skipped by the parser: the text parses back, without the plan (re-run
// plan-memory to get it again).
//
// A fused kernel (ir/kernel_region.h) prints its body one level deeper and is named after what
// it fuses plus its position in the graph, the index codegen gives its CUDA kernel:
//
//     %act = kernel @dense_bias_relu_4(%x, %w, %b) {kind = "epilogue"} : f32[8,128] {
//       %fc1 = dense(%x, %w, %b) : f32[8,128] loc("fc1")
//       %act = relu(%fc1) : f32[8,128] loc("act")
//       return %act
//     }
//
// Attributes equal to the op's default are omitted. Names that are not plain identifiers
// ([A-Za-z0-9_.-]+) are quoted: %"block/conv:0". Values without a name are numbered.
#pragma once

#include <ostream>
#include <string>

#include "ir/graph.h"

namespace kiln::ir {

// `text` as a double-quoted string with C escapes (\" \\ \n): how the printer writes names
// that need quotes; also a valid C/C++ string literal.
std::string quoted_string(std::string_view text);

std::string print_graph(const Graph& graph);
void print_graph(std::ostream& out, const Graph& graph);

// "he_normal(seed = 1)", "dense<[1.0,2.0]>", "file(\"/w.safetensors\", \"key\")".
std::string param_source_to_string(const ParamSource& source);

}  // namespace kiln::ir
