// Runs a list of passes over a graph, with the instrumentation users debug passes with:
// IR dumps after each pass, verification between passes, per-pass timings, fuel.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace kiln::passes {

struct PassManagerOptions {
  bool print_ir_after_all = false;
  std::set<std::string> print_ir_after;  // pass names
  bool print_ir_after_change = false;    // dump only after passes that changed the graph
  // Run the verifier after every pass (a broken graph is an internal compiler error naming the
  // pass). On by default in debug builds.
#ifdef NDEBUG
  bool verify_each = false;
#else
  bool verify_each = true;
#endif
  std::set<std::string> debug_only;      // passes whose decisions are logged
  bool time_passes = false;
  int64_t fuel = -1;                     // rewrites allowed in all; < 0 unlimited
  // When set, every decision of the passes named in record_decisions is kept here as
  // (pass, message), as --debug-only would print it (PassContext::record_decisions).
  std::set<std::string> record_decisions;
  std::vector<std::pair<std::string, std::string>>* decisions = nullptr;
};

class PassManager {
 public:
  // Dumps, debug logs and timings go to `log` (stderr in the CLI).
  PassManager(PassManagerOptions options, std::ostream& log);

  // Appends a pass by name, optionally with options: "append-optimizer{optimizer=adam
  // lr=0.001}". An unknown name is a kiln::Error with a did-you-mean; malformed options too.
  void add(const std::string& spec);
  void add_all(const std::vector<std::string>& specs);
  const std::vector<const PassInfo*>& passes() const { return passes_; }

  // Runs every pass once, in order. Returns whether any changed the graph.
  bool run(ir::Graph& graph);

 private:
  PassManagerOptions options_;
  std::ostream& log_;
  std::vector<const PassInfo*> passes_;
  std::vector<std::map<std::string, std::string>> options_of_;  // one per entry of passes_
};

// Splits "name{key=value key=value}" into the pass name and its options (kiln::Error, naming
// the spec, when the braces or a key=value pair are malformed).
std::pair<std::string, std::map<std::string, std::string>> parse_pass_spec(const std::string& spec);

// The default pipelines, as data. opt_level 0: no rewriting at all (the graph as written, for
// differential tests and debugging); 1: the full inference pipeline.
std::vector<std::string> inference_pipeline(int opt_level);
// The training step: the gradients of the loss (the first output) and one optimizer update
// (`optimizer`: the append-optimizer options, "optimizer=adam lr=0.001"), then the inference
// pipeline's fusion and planning. No constant folding: parameters change every step.
// `distributed`: data-parallel training, whose gradients are averaged over the ranks before the
// update (data-parallel). `batch_invariant`: sums over the batch in a fixed per-sample tree
// (batch-invariant), so that the gradients' bits do not depend on how ranks cut the batch.
std::vector<std::string> training_pipeline(const std::string& optimizer, bool distributed = false,
                                           bool batch_invariant = false);
// The passes that make a training step of a forward graph: autodiff, then append-optimizer
// with `optimizer`'s options, except loss_scale=N (dynamic loss scaling from scale N), which
// goes to autodiff (it seeds the backward pass with the scale), and prune_X=V, which become
// the options X=V of a prune pass after them.
std::vector<std::string> backward_and_update(const std::string& optimizer);

// `pipeline` with split-k told which forward GEMMs a vendor library may compute (--library:
// cuDNN for conv2d, cuBLASLt for dense and matmul): split-k leaves those whole
// (`split-k{whole=conv2d+dense+matmul}`), since the library picks its own split-K, and its
// partial sums would end the library call.
// sparsify-two-four leaves those layers' weights dense (`sparsify-two-four{library=conv2d}`, or
// =dense), or goes when the libraries take both: they read dense weights. Apply it after
// with_autocast, which inserts that pass.
std::vector<std::string> keep_vendor_gemms_whole(std::vector<std::string> pipeline, bool conv2d,
                                                 bool matrix_products);

// `pipeline` with layout-nhwc right after fold-batch-norm (whose batch norms read NCHW), when
// `nhwc`: cuDNN computes the convolutions (--library) on tensor cores (--precision=tf32, bf16
// or f16), which read NHWC without transforming. Unchanged otherwise, or when the pipeline does
// not fold batch norms (training steps, -O0, --passes).
std::vector<std::string> with_nhwc_convolutions(std::vector<std::string> pipeline, bool nhwc);

// `pipeline` with autocast{to=`low`} (bf16 or f16: --precision) right after fuse-attention,
// which must see the f32 chain it fuses, and before autodiff, whose backward pass then runs its
// GEMMs in 16 bits too; a pipeline that folds constants folds once more after it, so inference
// weights become 16-bit parameters, and then reads the 2:4-sparse ones compressed
// (sparsify-two-four). Unchanged when `low` is empty or the pipeline has no
// fuse-attention (-O0, --passes: the passes as given).
std::vector<std::string> with_autocast(std::vector<std::string> pipeline, std::string_view low);

}  // namespace kiln::passes
