// `kiln generate MODEL --checkpoint FILE --prompt TEXT`: sample text from a byte-level language
// model trained with `kiln train` (compiler/generator.h).
#include <iostream>

#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/generator.h"

namespace kiln::cli {
namespace generate_command {

struct Options {
  compiler::GenerateOptions generate;
  CacheFlags cache;
};

int run(Options& options) {
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  options.generate.cache = cache.get();
  options.generate.verbose = options.cache.verbose;
  compiler::generate(options.generate, std::cout);
  return kExitOk;
}

}  // namespace generate_command

Command add_generate_command(CLI::App& app) {
  using namespace generate_command;
  auto options = std::make_shared<Options>();
  compiler::GenerateOptions& g = options->generate;
  CLI::App* cmd = app.add_subcommand(
      "generate", "Sample text from a byte-level language model (e.g. examples/gpt.json trained "
                  "with kiln train)");
  cmd->add_option("MODEL", g.model, "the model file the checkpoint was trained from")->required();
  cmd->add_option("--checkpoint", g.checkpoint,
                  "parameters from kiln train --checkpoint (default: the model's own weights)");
  cmd->add_option("--prompt", g.prompt, "the text to continue")->required();
  cmd->add_option("--tokens", g.tokens, "bytes to sample")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature", g.temperature,
                  "divides the logits: lower is more conservative; 0 always takes the most "
                  "likely byte")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--top-k", g.top_k, "sample among the k most likely bytes only (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", g.seed, "of the sampling stream: the same seed, the same text")
      ->capture_default_str();
  cmd->add_option("--backend", g.backend,
                  "auto (cuda when a GPU is available, else host), host, cuda or reference")
      ->check(CLI::IsMember({"auto", "host", "cuda", "reference"}))
      ->capture_default_str();
  options->cache.add_to(*cmd);
  return {cmd, [options]() { return run(*options); }};
}

}  // namespace kiln::cli
