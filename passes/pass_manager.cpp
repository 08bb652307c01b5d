#include "passes/pass_manager.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::passes {

PassContext::PassContext(std::set<std::string> debug_only, int64_t fuel, std::ostream* debug_stream)
    : debug_only_(std::move(debug_only)), fuel_(fuel), debug_stream_(debug_stream) {}

bool PassContext::take_fuel(std::string_view pass, std::string_view what) {
  if (fuel_ == 0) {
    debug(pass, fmt::format("out of fuel, not rewriting: {}", what));
    return false;
  }
  if (fuel_ > 0) --fuel_;
  debug(pass, what);
  return true;
}

bool PassContext::debugging(std::string_view pass) const {
  const std::string name(pass);
  return debug_only_.count(name) || debug_only_.count("all") || (decisions_ && recorded_.count(name));
}

void PassContext::debug(std::string_view pass, std::string_view message) {
  const std::string name(pass);
  if (debug_stream_ && (debug_only_.count(name) || debug_only_.count("all")))
    *debug_stream_ << "[" << pass << "] " << message << "\n";
  if (decisions_ && recorded_.count(name)) decisions_->emplace_back(name, message);
}

std::string PassContext::option(const std::string& key, const std::string& fallback) const {
  auto it = options_.find(key);
  return it == options_.end() ? fallback : it->second;
}

double PassContext::number_option(std::string_view pass, const std::string& key,
                                  double fallback) const {
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size())
    throw Error("--passes", fmt::format("pass '{}': option {}={} is not a number", pass, key,
                                        it->second));
  return value;
}

void PassContext::check_options(std::string_view pass, const std::vector<std::string>& known) const {
  for (const auto& [key, value] : options_) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string message = fmt::format("pass '{}' has no option '{}'", pass, key);
    if (auto hint = ir::closest_name(key, known)) message += "; did you mean '" + *hint + "'?";
    throw Error("--passes", message);
  }
}

std::pair<std::string, std::map<std::string, std::string>> parse_pass_spec(const std::string& spec) {
  const size_t open = spec.find('{');
  if (open == std::string::npos) return {spec, {}};
  if (spec.back() != '}')
    throw Error("--passes", "pass options must end with '}': '" + spec + "'");
  std::map<std::string, std::string> options;
  std::string body = spec.substr(open + 1, spec.size() - open - 2);
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = std::min(body.find(' ', at), body.size());
    const std::string item = body.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw Error("--passes", "pass option '" + item + "' in '" + spec + "' is not key=value");
    options[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return {spec.substr(0, open), std::move(options)};
}

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = {
#define PASS(ClassName, name, summary) PassInfo{name, summary, &ClassName::run},
#include "passes/Passes.def"
  };
  return passes;
}

const PassInfo* find_pass(std::string_view name) {
  for (const PassInfo& pass : all_passes())
    if (pass.name == name) return &pass;
  return nullptr;
}

PassManager::PassManager(PassManagerOptions options, std::ostream& log)
    : options_(std::move(options)), log_(log) {}

void PassManager::add(const std::string& spec) {
  auto [name, options] = parse_pass_spec(spec);
  const PassInfo* pass = find_pass(name);
  if (pass == nullptr) {
    std::vector<std::string> known;
    for (const PassInfo& p : all_passes()) known.emplace_back(p.name);
    std::string message = "unknown pass '" + name + "'";
    if (auto hint = ir::closest_name(name, known)) message += "; did you mean '" + *hint + "'?";
    throw Error("--passes", message);
  }
  passes_.push_back(pass);
  options_of_.push_back(std::move(options));
}

void PassManager::add_all(const std::vector<std::string>& names) {
  for (const std::string& name : names) add(name);
}

bool PassManager::run(ir::Graph& graph) {
  PassContext context(options_.debug_only, options_.fuel, &log_);
  if (options_.decisions) context.record_decisions(options_.record_decisions, options_.decisions);
  std::vector<std::pair<std::string_view, double>> timings;
  bool any_change = false;
  for (size_t index = 0; index < passes_.size(); ++index) {
    const PassInfo* pass = passes_[index];
    context.set_options(options_of_[index]);
    const auto start = std::chrono::steady_clock::now();
    const bool changed = pass->run(graph, context);
    timings.push_back({pass->name, std::chrono::duration<double, std::milli>(
                                       std::chrono::steady_clock::now() - start).count()});
    any_change |= changed;
    // A plan is for one graph: a later rewrite makes it stale, so it goes (plan-memory again
    // makes a new one).
    if (changed && pass->name != "plan-memory") graph.memory_plan.reset();
    if (options_.verify_each) {
      try {
        ir::verify(graph);
      } catch (const Error& error) {
        throw InternalError("internal compiler error: the graph does not verify after pass '" +
                            std::string(pass->name) + "': " + error.what());
      }
    }
    const bool dump = options_.print_ir_after_all ||
                      options_.print_ir_after.count(std::string(pass->name)) ||
                      (options_.print_ir_after_change && changed);
    if (dump) {
      // A comment header, so the whole dump is valid textual IR again.
      log_ << fmt::format("// IR after {}{}\n", pass->name, changed ? "" : " (unchanged)");
      ir::print_graph(log_, graph);
    }
  }
  if (options_.time_passes) {
    double total = 0;
    log_ << "// pass timings\n";
    for (const auto& [name, ms] : timings) {
      log_ << fmt::format("//   {:<24} {:>9.3f} ms\n", name, ms);
      total += ms;
    }
    log_ << fmt::format("//   {:<24} {:>9.3f} ms\n", "total", total);
  }
  return any_change;
}

std::vector<std::string> inference_pipeline(int opt_level) {
  if (opt_level <= 0) return {};
  return {
      // Rewrite to canonical forms first, so later passes see fewer shapes of the same thing.
      "canonicalize",
      // Inference batch_norm disappears into the weights of the conv2d or dense before it.
      "fold-batch-norm",
      // Whatever depends only on parameters is computed once, now.
      "constant-fold",
      // Identical nodes (often left by the rewrites above) are computed once.
      "cse",
      // GELU spelled out in five nodes becomes one, which a GEMM epilogue can take.
      "fuse-gelu",
      // matmul, softmax, matmul chains become attention: no S x S scores in memory.
      "fuse-attention",
      // Nothing unused survives to codegen.
      "dce",
      // Attention reads q, k, v and writes its output through the views around it.
      "fuse-attention-views",
      // Convolutions and dense layers with too few GEMM tiles for the GPU (small batches) sum K
      // in chunks.
      "split-k",
      // GEMMs take their bias, residual add and activation into their epilogue...
      "fuse-conv-bias-relu",
      // ...read their rows through the transposes that make them (sequence-first exports)...
      "fuse-gemm-views",
      // ...recompute the norm they add as a residual (post-norm transformers)...
      "fuse-norm-residual",
      // ...and normalize the rows they read as they stage them (pre-norm transformers)...
      "fuse-norm-prologue",
      // ...then elementwise chains become loops, feed reductions and GEMM epilogues, and
      // reshapes disappear into their producer.
      "fuse-elementwise",
      // Last, on the final schedule: intermediates get offsets in one arena, dead ones reused.
      "plan-memory",
  };
}

std::vector<std::string> keep_vendor_gemms_whole(std::vector<std::string> pipeline, bool conv2d,
                                                 bool matrix_products) {
  if (!conv2d && !matrix_products) return pipeline;
  const std::string whole = conv2d && matrix_products ? "conv2d+dense+matmul"
                            : conv2d                  ? "conv2d"
                                                      : "dense+matmul";
  for (std::string& pass : pipeline)
    if (pass == "split-k") pass = "split-k{whole=" + whole + "}";
  // cuDNN computes the convolutions, cuBLASLt the dense layers, from dense weights: no 2:4
  // weight is compressed for them.
  if (conv2d && matrix_products)
    std::erase(pipeline, "sparsify-two-four");
  else
    std::replace(pipeline.begin(), pipeline.end(), std::string("sparsify-two-four"),
                 std::string(conv2d ? "sparsify-two-four{library=conv2d}" : "sparsify-two-four{library=dense}"));
  return pipeline;
}

std::vector<std::string> backward_and_update(const std::string& optimizer) {
  std::string autodiff, update, prune;
  std::istringstream words(optimizer);
  for (std::string word; words >> word;) {
    std::string* options = &update;
    if (word.starts_with("loss_scale=")) options = &autodiff;
    if (word.starts_with("prune_")) {
      options = &prune;
      word = word.substr(std::string_view("prune_").size());
    }
    *options += (options->empty() ? "" : " ") + word;
  }
  std::vector<std::string> passes = {autodiff.empty() ? "autodiff" : "autodiff{" + autodiff + "}",
                                     "append-optimizer{" + update + "}"};
  if (!prune.empty()) passes.push_back("prune{" + prune + "}");
  return passes;
}

std::vector<std::string> training_pipeline(const std::string& optimizer, bool distributed,
                                           bool batch_invariant) {
  std::vector<std::string> pipeline = {
      "canonicalize",
      // Before autodiff, so that the backward pass is attention_grad, not the S x S chain's.
      "fuse-attention",
  };
  // Backward graph, then the update that consumes the gradients (and pruning, after it).
  for (std::string& pass : backward_and_update(optimizer)) pipeline.push_back(std::move(pass));
  pipeline.insert(pipeline.end(), {
      // Forward and backward often compute the same thing (e.g. a transposed weight).
      "cse",
      "dce",
      // Weight gradients with few GEMM tiles and a long sum over the batch fill the GPU.
      "split-k",
      // Batch-norm statistics and other long sums with few results: many blocks, two stages.
      "split-batch-norm",
      "split-reductions",
      "fuse-conv-bias-relu",
      "fuse-elementwise",
      // Activations saved for the backward pass, gradients and temporaries share one arena.
      "plan-memory",
  });
  // Data-parallel: every rank updates with the gradients averaged over the ranks.
  if (distributed) pipeline.insert(pipeline.begin() + 3, "data-parallel");
  if (batch_invariant) {
    // Sums over the batch per sample, added in a fixed tree; the split passes go, since they
    // choose their chunks from sizes that grow with the batch.
    pipeline.insert(pipeline.begin() + 3, "batch-invariant");
    std::erase_if(pipeline, [](const std::string& pass) {
      return pass == "split-k" || pass == "split-batch-norm" || pass == "split-reductions";
    });
  }
  return pipeline;
}

std::vector<std::string> with_nhwc_convolutions(std::vector<std::string> pipeline, bool nhwc) {
  if (!nhwc) return pipeline;
  auto at = std::find(pipeline.begin(), pipeline.end(), "fold-batch-norm");
  if (at != pipeline.end()) pipeline.insert(at + 1, "layout-nhwc");
  return pipeline;
}

std::vector<std::string> with_autocast(std::vector<std::string> pipeline, std::string_view low) {
  if (low.empty()) return pipeline;
  auto at = std::find(pipeline.begin(), pipeline.end(), "fuse-attention");
  if (at == pipeline.end()) return pipeline;
  const bool folds = std::find(pipeline.begin(), pipeline.end(), "constant-fold") != pipeline.end();
  at = pipeline.insert(at + 1, fmt::format("autocast{{to={}}}", low));
  // The weights are 16-bit parameters once folded: the 2:4 ones are read compressed.
  if (folds) pipeline.insert(pipeline.insert(at + 1, "constant-fold") + 1, "sparsify-two-four");
  return pipeline;
}

}  // namespace kiln::passes
