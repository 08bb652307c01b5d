// The `kiln` command-line tool: one function per subcommand, sharing nothing but this header.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace kiln::cli {

// Exit codes: 0 success, 1 user error (bad model, data, flags' values), 2 usage error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUserError = 1;
inline constexpr int kExitUsage = 2;

// A registered subcommand and what runs it once the command line has been parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// After CLI11 rejected the command line: "did you mean" for an unknown subcommand or flag
// (compiler/cli_suggest.cpp), or nullopt when nothing is close.
std::optional<std::string> suggest_correction(const CLI::App& app, int argc, char** argv);

Command add_opt_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_emit_command(CLI::App& app);
Command add_compile_command(CLI::App& app);
Command add_cache_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_import_command(CLI::App& app);
Command add_serve_command(CLI::App& app);

}  // namespace kiln::cli
