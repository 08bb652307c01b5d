// Turning a model's batch_norm nodes into their training form, for the training runtime. Also
// the pass lower-batch-norm-training (Passes.def), which does the same under pass fuel.
#pragma once

#include "ir/graph.h"

namespace kiln::passes {

// Rewrites every batch_norm(x, scale, bias, running_mean, running_var) node into
//   (y, batch_mean, batch_var) = batch_norm_train(x, scale, bias)
// and appends the running-average updates as graph outputs, as torch.nn.BatchNorm2d.train()
// does in its forward pass (momentum m: the node's attribute, 0.1 by default):
//   "next.<running_mean>" = (1 - m) * running_mean + m * batch_mean
//   "next.<running_var>"  = (1 - m) * running_var  + m * batch_var * n / (n - 1)
// where n is the number of values per channel: the running variance is the UNBIASED one, while
// y is normalized with the biased one. The training runtime copies each output named next.P
// into parameter P after a step. y keeps the batch_norm result's name, so later nodes and graph
// outputs are unchanged; the training attribute is ignored (a training step always uses batch
// statistics). Throws kiln::Error naming the node when a running statistic is not a
// parameter, when two batch_norm nodes share one, or when a channel has a single value.
// Run it before autodiff: batch_norm_train's gradient covers x, scale and bias only.
void lower_batch_norm_for_training(ir::Graph& graph);

}  // namespace kiln::passes
