// What the fusion passes (fuse-conv-bias-relu, fuse-elementwise) decide alike: when a value may
// stay in registers, and which operands a GEMM epilogue can read. Every "no" is a reason, a
// phrase that completes "not fusing %a into %b: ...".
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes::fusion {

// "%conv1".
std::string ref(const ir::Value* value);
// "%relu1 (relu 'relu1')": a consumer as the debug output names it.
std::string ref(const ir::Node& node);

// Why `value` must be stored rather than passed to its one consumer in registers: it is a graph
// output, or it has several users (the multi-consumer policy: keep the boundary, see
// fuse_elementwise.cpp). nullopt when it has exactly one user.
std::optional<std::string> stored_value_reason(const ir::Graph& graph, const ir::Value* value);
// The same, given the value's number of users (from a Users index).
std::optional<std::string> stored_value_reason(const ir::Graph& graph, const ir::Value* value,
                                               size_t users);

// Every value's readers, in graph order (a node reading a value twice is listed once), built
// in one sweep: Graph::users scans the graph per call, which a pass asking once per node
// cannot afford.
class Users {
 public:
  explicit Users(const ir::Graph& graph);
  const std::vector<ir::Node*>& of(const ir::Value* value) const;

 private:
  std::unordered_map<const ir::Value*, std::vector<ir::Node*>> users_;
  std::vector<ir::Node*> none_;
};

// Whether `node` is a plain conv2d, dense or matmul: a GEMM whose epilogue can take ops.
bool is_gemm(const ir::Node& node);

// Whether the GEMM's A operand is its rows [M, K] with one B for all of them: a dense, or a
// matmul with a untransposed and b without batch dims (the GEMM then folds a's batch into
// rows), as ONNX exports a Linear layer. What a norm prologue and row views need.
bool is_rows_gemm(const ir::Node& node);

// The GEMM an epilogue kernel computes first (after the view ops its rows come through, and
// any norm recomputed for its epilogue), when it is a rows GEMM (is_rows_gemm); for a plain
// node, the node itself when it is one. nullptr otherwise.
const ir::Node* rows_gemm_of(const ir::Node& consumer);

// Why the epilogue kernel `consumer` takes no norm prologue, row views or residual norm because
// its dense reads a 2:4 weight compressed (sparsify-two-four's expand_2_4): it then runs as
// weight * x^T on sparse tensor cores (codegen nn::dense_gemm_by_weight_rows), and its rows are
// the result's columns. nullopt for other nodes.
std::optional<std::string> compressed_weight_refusal(const ir::Node& consumer);

// Why `norm` (a layer_norm or rms_norm) cannot be normalized by `consumer` as the GEMM prologue
// of fuse-norm-prologue: the norm must normalize the last axis alone, in f32, and `consumer`
// must be a rows GEMM (or such a GEMM's epilogue kernel) that reads it as its rows only,
// directly or through views that keep each row of A one whole row of the norm. nullopt when it
// can. Whether the norm has other readers is the caller's question. `rows`: the value the GEMM
// reads when it is not the norm's result but its cast to the GEMM's 16-bit dtype (autocast's).
std::optional<std::string> norm_prologue_refusal(const ir::Node& norm, const ir::Node& consumer,
                                                 const ir::Value* rows = nullptr);

// Why `norm`'s result cannot be recomputed where it is read, as the GEMM prologue and the
// residual epilogue operand do: only a norm over the last axis alone, in f32. nullopt when it can.
std::optional<std::string> recomputed_norm_refusal(const ir::Node& norm);

// The axis of a conv2d/dense/matmul result that a bias indexes: 1 for conv2d (NCHW), the last
// for dense and matmul. What the GEMM template calls the channel.
int channel_axis(const ir::Node& gemm);

// Whether `gemm` computes split-K partial sums (k_chunk > 0, the split-k pass): [S, ...] partial
// results that a reduce_sum adds, which no epilogue, prologue or view may join.
bool is_split_k(const ir::Node& gemm);

// Why the epilogue of `gemm` (a conv2d, dense or matmul, whose value so far is `running`) cannot
// apply `consumer`: only float elementwise ops of the running value whose other operand is a
// per-channel vector, a scalar or a tensor of the result's shape (a residual). With
// `activations_only`, the op must also be bias_add, add or an activation (relu, leaky_relu,
// sigmoid, tanh, gelu, clip), as fuse-conv-bias-relu requires.
std::optional<std::string> epilogue_refusal(const ir::Node& gemm, const ir::Value* running,
                                            const ir::Node& consumer, bool activations_only);

// What an epilogue step is called in a kernel name: "bias" for a bias_add or a per-channel
// add, "add" for a residual or scalar add, else the op.
std::string epilogue_step_name(const ir::Node& gemm, const ir::Value* running,
                               const ir::Node& consumer);

}  // namespace kiln::passes::fusion
