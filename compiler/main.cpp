// kiln: an ahead-of-time compiler for deep-learning graphs on CUDA.
#include <iostream>

#include "compiler/cli.h"
#include "ir/diagnostic.h"

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app{"kiln: an ahead-of-time compiler for deep-learning graphs on CUDA", "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'kiln SUBCOMMAND --help' for a subcommand's options. Docs: README.md, docs/.");

  const std::vector<Command> commands = {add_opt_command(app), add_emit_command(app),
                                         add_compile_command(app),
                                         add_inspect_command(app), add_run_command(app),
                                         add_train_command(app), add_bench_command(app),
                                         add_import_command(app),
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
    return kExitUsage;
  }

  try {
    for (const Command& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const kiln::Error& error) {
    std::cerr << error.what() << "\n";
    return kExitUserError;
  } catch (const kiln::InternalError& error) {
    std::cerr << error.what() << "\nplease report this as a bug in kiln\n";
    return 70;
  }
  return kExitUsage;
}
