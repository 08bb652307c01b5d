// Bounded dynamic dims: a graph may name dims of its inputs ("batch", "seq") and give each name
// an upper bound. One compiled program then serves every size up to the bound.
//
// The design is XLA's dynamic padder: every type in the graph holds the bound, so shape
// inference, fusion, codegen and the memory plan see static shapes and need no symbolic
// arithmetic. At run time the runtime pads each input to the bound (zeros past the given
// size), runs the program, and slices each output back to the size the inputs implied.
//
// That is exact only when padding cannot reach a real result: no op may let an element at a
// padded position influence one at a real position. infer_dynamic_dims proves it for a graph,
// op by op (a rule per type rule of the op table), and refuses with the node and the reason
// where it cannot: a reduction or softmax over a dynamic axis, a matmul that contracts one, a
// reshape that interleaves it with another dim, a non-causal attention over dynamic keys.
//
// A dim of a value may also hold a symbol between static factors: reshaping [batch, 8, 16] to
// [batch * 8, 16] gives a dim of extent batch × 8, padded past n × 8; [12, batch * 4, 8] to
// [12 * batch * 4, 8] one of 12 blocks of batch × 4 rows, padded within each block. Row-wise
// ops (dense, elementwise) do not care where the padding lies; outputs are sliced per block.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::ir {

class Graph;
class Value;

// A named dim and its upper bound, declared by the graph ("batch" <= 64).
struct DimSymbol {
  std::string name;
  int64_t bound = 1;
  friend bool operator==(const DimSymbol&, const DimSymbol&) = default;
};

// How one dim of a value depends on the graph's symbols: static (symbol -1), or `outer` blocks
// of symbol `symbol` (an index into Graph::symbols) times `inner`. Index i of the dim is then
// (o, s, r) with i = (o × bound + s) × inner + r, and it is real when s < the run's size n: the
// types hold outer × bound × inner, a run outer × n × inner.
struct DynamicDim {
  int symbol = -1;
  int64_t outer = 1;
  int64_t inner = 1;
  bool is_dynamic() const { return symbol >= 0; }
  friend bool operator==(const DynamicDim&, const DynamicDim&) = default;
};

// One DynamicDim per dim of a value; empty means every dim is static.
using DimMap = std::vector<DynamicDim>;

bool has_dynamic_dims(const DimMap& dims);

// "batch", "12*batch*4": the dim's symbol between its factors.
std::string dim_name(const DynamicDim& dim, const std::vector<DimSymbol>& symbols);

// "f32[batch<=4,784]"; factors print around the symbol: "12*batch*4<=192". `dims` may be
// empty (static).
std::string type_with_dims(const std::string& dtype, const std::vector<int64_t>& shape,
                           const DimMap& dims, const std::vector<DimSymbol>& symbols);

// The dims of every value of `graph` that has a dynamic dim (values absent from the map are
// static), from the graph inputs' declared dims, through every node (fused kernels through their
// bodies). Throws kiln::Error, located at the node, where an op could let padding reach a real
// result or does not support dynamic dims. A graph without symbols gives an empty map at once.
std::unordered_map<const Value*, DimMap> infer_dynamic_dims(const Graph& graph);

// The dims of each graph output, in order (empty entries for static outputs).
std::vector<DimMap> output_dynamic_dims(const Graph& graph);

// Sets each symbol to sizes[i] (>= 1, above its bound too): input types, the target shapes of
// reshape and broadcast_to, and every result type follow exactly, as the analysis says each
// dim depends on the symbols; the symbols keep their names with these sizes as bounds. Before
// fusion only (kiln::Error at a kernel node). What training and `kiln bench --batch` use to fix
// a dynamic batch.
void resize_dynamic_dims(Graph& graph, const std::vector<int64_t>& sizes);

// Forgets the symbols and the inputs' dynamic dims: the graph becomes static at the sizes its
// types hold (what set_batch_size leaves before a training graph is built).
void drop_dynamic_dims(Graph& graph);

}  // namespace kiln::ir
