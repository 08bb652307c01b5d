// kiln: an ahead-of-time compiler for deep-learning graphs on CUDA.
#include <cstdio>
#include <iostream>

#include "compiler/cli.h"
#include "compiler/interrupt.h"
#include "ir/diagnostic.h"
#include "runtime/distributed/communicator.h"

int main(int argc, char** argv) {
  using namespace kiln::cli;
  // Line by line when stdout is a pipe or a file too, so that `kiln train ... | tee log` shows
  // each epoch as it ends (stdio buffers whole blocks otherwise).
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  CLI::App app{"kiln: an ahead-of-time compiler for deep-learning graphs on CUDA", "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'kiln SUBCOMMAND --help' for a subcommand's options. Docs: README.md, docs/.");

  const std::vector<Command> commands = {add_opt_command(app), add_emit_command(app),
                                         add_compile_command(app),
                                         add_inspect_command(app), add_run_command(app),
                                         add_train_command(app), add_generate_command(app),
                                         add_bench_command(app),
                                         add_import_command(app), add_serve_command(app),
                                         add_cache_command(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    if (auto hint = suggest_correction(app, argc, argv)) std::cerr << "kiln: " << *hint << "\n";
    return kExitUsage;
  }

  try {
    for (const Command& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const kiln::compiler::Interrupted&) {
    std::cerr << "kiln: interrupted (" << kiln::compiler::interrupt_signal_name() << ")\n";
    return kiln::compiler::kExitInterrupted;
  } catch (const kiln::Error& error) {
    std::cerr << kiln::runtime::distributed::rank_prefix() << error.what() << "\n";
    // A child process (the host compiler) killed by the same Ctrl-C fails with an error.
    if (kiln::compiler::interrupted()) return kiln::compiler::kExitInterrupted;
    // The other ranks of a data-parallel run may wait for this one in a collective: stop them.
    if (auto* world = kiln::runtime::distributed::started_world()) world->abort(kExitUserError);
    return kExitUserError;
  } catch (const kiln::InternalError& error) {
    std::cerr << kiln::runtime::distributed::rank_prefix() << error.what()
              << "\nplease report this as a bug in kiln\n";
    if (auto* world = kiln::runtime::distributed::started_world()) world->abort(70);
    return 70;
  }
  return kExitUsage;
}
