// Runs a list of passes over a graph, with the instrumentation users debug passes with:
// IR dumps after each pass, verification between passes, per-pass timings, fuel.
#pragma once

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
};

class PassManager {
 public:
  // Dumps, debug logs and timings go to `log` (stderr in the CLI).
  PassManager(PassManagerOptions options, std::ostream& log);

  // Appends a pass by name. An unknown name is a kiln::Error with a did-you-mean.
  void add(const std::string& name);
  void add_all(const std::vector<std::string>& names);
  const std::vector<const PassInfo*>& passes() const { return passes_; }

  // Runs every pass once, in order. Returns whether any changed the graph.
  bool run(ir::Graph& graph);

 private:
  PassManagerOptions options_;
  std::ostream& log_;
  std::vector<const PassInfo*> passes_;
};

// The default pipelines, as data. opt_level 0: no rewriting at all (the graph as written, for
// differential tests and debugging); 1: the full inference pipeline.
std::vector<std::string> inference_pipeline(int opt_level);

}  // namespace kiln::passes
