// From an inference model to the graphs `kiln train` compiles: the forward graph of one
// training step (batch size, loss, labels, dropout in training mode) and the evaluation graph
// (the model at the evaluation batch size). The passes then append the backward graph and
// the optimizer step (passes::training_pipeline); docs/training.md has the whole flow.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace kiln::compiler {

// Gives the graph batch size `batch` and makes it static. A graph whose first input starts with
// a dynamic dim (ir/dynamic_dims.h) has that dim resized exactly (ir::resize_dynamic_dims).
// Otherwise every input's dim 0 is the batch, every node's result type is re-inferred, and
// reshapes whose target shape starts with the old batch size follow it. kiln::Error, naming
// the node, when the graph's inputs disagree on the batch size or a node does not accept the
// new one.
void set_batch_size(ir::Graph& graph, int64_t batch);

struct TrainingGraphOptions {
  int64_t batch_size = 32;
  uint64_t seed = 0;  // dropout streams: node k draws from Philox key mix(seed, k)
  // Data-parallel training: this process's shard of each global batch (rank r trains on samples
  // r * batch_size ... of it). Dropouts draw from where the shard starts in the stream, so
  // that the masks are keyed by the global sample (as one process training the global batch).
  int rank = 0;
};

// What make_training_graph did, for messages and for the trainer.
struct TrainingGraphInfo {
  std::string loss;          // "softmax_cross_entropy of %fc2 (the input of softmax 'probs')"
  std::string label_input;   // name of the labels input ("label"), i32 [batch] or [batch, ...]
  std::string logits;        // name of the output the trainer reads predictions from
  int dropout_nodes = 0;
  int batch_norm_nodes = 0;  // now batch_norm_train, with running averages as outputs next.*
};

// Rewrites an inference classifier into the forward graph of a training step:
//   - a model whose first output is softmax(logits) trains on softmax_cross_entropy(logits,
//     label) with a new input "label" (i32 [batch]); outputs become (loss, logits), and the
//     softmax goes (the loss computes it stably from the logits). Logits [batch, ..., classes]
//     (a language model's [batch, sequence, vocabulary]) take a label per position, i32
//     [batch, ...], and the loss is the mean over all positions (both viewed as rows);
//   - dropout nodes switch to training mode, reading the step counter "train.step" (an i32[1]
//     parameter starting at 1, which the optimizer step advances) and each its own seed (and,
//     on rank r of a data-parallel run, word_offset r x its input's elements);
//   - batch_norm nodes normalize with batch statistics and update their running averages
//     (outputs next.<running_mean>, next.<running_var>: passes/batch_norm_training.h).
// Throws kiln::Error when no loss can be derived (the model must end in softmax).
TrainingGraphInfo make_training_graph(ir::Graph& graph, const TrainingGraphOptions& options);

}  // namespace kiln::compiler
