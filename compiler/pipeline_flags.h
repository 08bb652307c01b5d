// The pass-pipeline flags shared by `opt`, `emit` and `run`, and running the pipeline.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "codegen/library_call.h"
#include "codegen/precision.h"
#include "compiler/package_builder.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace kiln::cli {

struct PipelineFlags {
  int opt_level = 1;
  std::vector<std::string> passes;     // --passes: replaces the default pipeline
  bool passes_given = false;
  passes::PassManagerOptions manager;
  std::vector<std::string> debug_only;
  std::vector<std::string> print_after;

  // `default_level`: -O when not given (opt prints the graph as written unless asked).
  void add_to(CLI::App& command, int default_level);
  // The passes run() runs, in order: --passes as given, or the default pipeline for -O, whose
  // split-k leaves whole the forward GEMMs `libraries` (--library) may compute
  // (passes::keep_vendor_gemms_whole), and which at a 16-bit `precision` autocasts
  // (passes::with_autocast).
  std::vector<std::string> pass_names(const codegen::LibrarySelection& libraries = {},
                                      codegen::Precision precision = codegen::Precision::F32) const;
  // Runs --passes, or the default pipeline for -O. Dumps and logs go to stderr. `decisions`:
  // where to keep the fusion passes' decisions (every refusal, with its reason), if anywhere.
  void run(ir::Graph& graph, std::vector<std::pair<std::string, std::string>>* decisions = nullptr,
           const codegen::LibrarySelection& libraries = {},
           codegen::Precision precision = codegen::Precision::F32) const;
  // Whether -O or --passes was given (a package is already compiled: they cannot apply).
  bool given(const CLI::App& command) const;
  // Whether a flag watches or limits the passes (IR dumps, pass logs and times, --pass-fuel):
  // then they must run, and the package cannot come from the package cache.
  bool observes() const;
  // Sets `request`'s pipeline from these flags: -O, the pass names, how to run them (this
  // object must outlive the request), and whether the package may come from the package cache.
  void apply_to(compiler::PackageRequest& request, const codegen::LibrarySelection& libraries,
                codegen::Precision precision) const;
};

}  // namespace kiln::cli
