#include "compiler/pipeline_flags.h"

#include <iostream>

#include "codegen/library_dispatch.h"
#include "compiler/parameters.h"

namespace kiln::cli {

void PipelineFlags::add_to(CLI::App& command, int default_level) {
  opt_level = default_level;
  command.add_option("-O", opt_level, "optimization level: 0 runs no pass (the graph as written), "
                                      "1 the default pipeline")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  command.add_option("--passes", passes, "run these passes, in order, instead of the default pipeline")
      ->delimiter(',');
  command.add_flag("--print-ir-after-all", manager.print_ir_after_all,
                   "print the IR after every pass (on stderr, each dump headed by a comment)");
  command.add_option("--print-ir-after", print_after, "print the IR after the named pass(es)")
      ->delimiter(',');
  command.add_flag("--print-ir-after-change", manager.print_ir_after_change,
                   "print the IR after each pass that changed it");
  command.add_flag("--verify-each,!--no-verify-each", manager.verify_each,
                   "verify the graph after every pass (default on in debug builds)");
  command.add_option("--debug-only", debug_only,
                     "log the decisions of the named pass(es), 'all' for every pass")
      ->delimiter(',');
  command.add_flag("--time-passes", manager.time_passes, "print the time each pass took");
  command.add_option("--pass-fuel", manager.fuel,
                     "stop rewriting after N rewrites in all (to bisect a miscompile to one)")
      ->check(CLI::NonNegativeNumber);
}

std::vector<std::string> PipelineFlags::pass_names(const codegen::LibrarySelection& libraries,
                                                  codegen::Precision precision) const {
  if (!passes.empty()) return passes;
  return passes::keep_vendor_gemms_whole(
      passes::with_autocast(passes::with_nhwc_convolutions(passes::inference_pipeline(opt_level),
                                                           codegen::cudnn_reads_nhwc(libraries, precision)),
                            codegen::autocast_dtype(precision)),
      libraries.cudnn, libraries.cublaslt);
}

bool PipelineFlags::given(const CLI::App& command) const {
  return command.count("-O") > 0 || command.count("--passes") > 0;
}

bool PipelineFlags::observes() const {
  return manager.print_ir_after_all || manager.print_ir_after_change || !print_after.empty() ||
         !debug_only.empty() || manager.time_passes || manager.fuel >= 0;
}

void PipelineFlags::apply_to(compiler::PackageRequest& request,
                             const codegen::LibrarySelection& libraries,
                             codegen::Precision precision) const {
  request.opt_level = opt_level;
  request.pipeline = pass_names(libraries, precision);
  request.run_pipeline = [this, libraries, precision](ir::Graph& graph, compiler::PassDecisions* decisions) {
    run(graph, decisions, libraries, precision);
  };
  request.reuse_package = !observes();
}

void PipelineFlags::run(ir::Graph& graph, std::vector<std::pair<std::string, std::string>>* decisions,
                        const codegen::LibrarySelection& libraries,
                        codegen::Precision precision) const {
  passes::PassManagerOptions options = manager;
  if (decisions) {
    options.decisions = decisions;
    options.record_decisions = {"fuse-conv-bias-relu", "fuse-elementwise"};
  }
  options.debug_only.insert(debug_only.begin(), debug_only.end());
  options.print_ir_after.insert(print_after.begin(), print_after.end());
  passes::PassManager manager_instance(options, std::cerr);
  // Names are checked before anything runs, so a typo never half-optimizes a graph.
  for (const std::string& name : print_after)
    if (!passes::find_pass(name)) manager_instance.add(name);  // throws with a did-you-mean
  manager_instance.add_all(pass_names(libraries, precision));
  if (manager_instance.passes().empty()) return;
  // Folding passes compute with parameter values, so every parameter needs its data first.
  compiler::load_parameter_data(graph);
  manager_instance.run(graph);
}

}  // namespace kiln::cli
