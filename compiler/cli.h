// The `kiln` command-line tool: one function per subcommand, sharing nothing but this header.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cli {

// Exit codes: 0 success, 1 user error (bad model, data, flags' values), 2 usage error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUserError = 1;
inline constexpr int kExitUsage = 2;

// Each registers its subcommand on `app`; the returned callback runs it after parsing.
std::function<int()> add_opt_command(CLI::App& app);
std::function<int()> add_run_command(CLI::App& app);

}  // namespace kiln::cli
