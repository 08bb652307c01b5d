// What a pass is, and what it may ask of the pass manager.
//
// A pass is a function that rewrites an ir::Graph in place and returns whether it changed it.
// It reads nothing but the graph and its PassContext, emits no source text, and leaves a graph
// that verifies. Every rewrite first asks for fuel (take_fuel), so --pass-fuel=N stops after N
// rewrites and a miscompile can be bisected to one; every refusal to rewrite is reported with
// its reason under --debug-only=<pass>.
#pragma once

#include <cstdint>
#include <map>
#include <vector>
#include <ostream>
#include <set>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::passes {

class PassContext {
 public:
  PassContext() = default;
  PassContext(std::set<std::string> debug_only, int64_t fuel, std::ostream* debug_stream);

  // True when pass `pass` may make one more rewrite, described by `what` ("fold bn1 into
  // conv1"); false once the fuel is spent (then the pass must leave the graph as it is).
  bool take_fuel(std::string_view pass, std::string_view what);
  // Whether --debug-only names `pass` (or "all").
  bool debugging(std::string_view pass) const;
  // Logs "[pass] message" when debugging(pass): why something was or was not rewritten.
  void debug(std::string_view pass, std::string_view message);

  int64_t fuel_left() const { return fuel_; }  // < 0: unlimited

  // Keeps every decision of the passes in `passes` ("pass", "message") in `decisions` as well,
  // whatever --debug-only says: how `kiln compile` records fusion refusals for its report.
  void record_decisions(std::set<std::string> passes,
                        std::vector<std::pair<std::string, std::string>>* decisions) {
    recorded_ = std::move(passes);
    decisions_ = decisions;
  }

  // The options the running pass was given, MLIR-style: `append-optimizer{optimizer=adam
  // lr=0.001}` gives {optimizer: adam, lr: 0.001}. Most passes take none; a pass that takes
  // some reads them with these and rejects keys it does not know (check_options).
  const std::map<std::string, std::string>& options() const { return options_; }
  void set_options(std::map<std::string, std::string> options) { options_ = std::move(options); }
  // The option `key` as given, or `fallback` when absent.
  std::string option(const std::string& key, const std::string& fallback) const;
  // `key` as a number (kiln::Error naming the pass and key when it is not one).
  double number_option(std::string_view pass, const std::string& key, double fallback) const;
  // kiln::Error when an option key is not in `known`.
  void check_options(std::string_view pass, const std::vector<std::string>& known) const;

 private:
  std::map<std::string, std::string> options_;
  std::set<std::string> debug_only_;
  int64_t fuel_ = -1;
  std::ostream* debug_stream_ = nullptr;
  std::set<std::string> recorded_;
  std::vector<std::pair<std::string, std::string>>* decisions_ = nullptr;
};

struct PassInfo {
  std::string_view name;     // "fuse-conv-bias-relu"
  std::string_view summary;
  bool (*run)(ir::Graph&, PassContext&);
};

// Every pass of Passes.def, in its order there.
const std::vector<PassInfo>& all_passes();
const PassInfo* find_pass(std::string_view name);

// One declaration per pass in Passes.def.
#define PASS(ClassName, name, summary) \
  struct ClassName {                   \
    static bool run(ir::Graph& graph, PassContext& context); \
  };
#include "passes/Passes.def"

}  // namespace kiln::passes
