// "did you mean" for a command line that CLI11 rejected: an unknown subcommand or flag.
#include <string>
#include <vector>

#include "compiler/cli.h"
#include "ir/op_registry.h"  // closest_name

namespace kiln::cli {

namespace {

// The long flags of `command` ("--epochs"), and its short ones ("-o").
std::vector<std::string> flag_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

}  // namespace

std::optional<std::string> suggest_correction(const CLI::App& app, int argc, char** argv) {
  const CLI::App* command = nullptr;
  std::vector<std::string> subcommands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    subcommands.push_back(sub->get_name());
    if (sub->parsed()) command = sub;
  }
  if (command == nullptr) {
    // No subcommand was recognized: the first word that is not a flag was meant as one.
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word.starts_with("-")) continue;
      if (auto hint = ir::closest_name(word, subcommands))
        return "unknown subcommand '" + word + "'; did you mean '" + *hint + "'?";
      return std::nullopt;
    }
    return std::nullopt;
  }
  const std::vector<std::string> known = flag_names(*command);
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--") break;
    if (!word.starts_with("--")) continue;
    word = word.substr(0, word.find('='));
    if (std::find(known.begin(), known.end(), word) != known.end()) continue;
    if (auto hint = ir::closest_name(word, known))
      return "unknown flag '" + word + "'; did you mean '" + *hint + "'?";
  }
  return std::nullopt;
}

}  // namespace kiln::cli
