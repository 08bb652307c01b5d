#include "compiler/pruning.h"

#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace kiln::compiler {

std::string pruning_options(const StepScalarFlags& scalars) {
  const bool two_four = scalars.prune_pattern == "2:4";
  if (scalars.prune_pattern != "unstructured" && !two_four)
    throw Error("--prune-pattern", "expected unstructured or 2:4, got '" + scalars.prune_pattern + "'");
  if (!(scalars.prune >= 0 && scalars.prune < 1))
    throw Error("--prune", fmt::format("must be in [0, 1), got {}", scalars.prune));
  if (two_four && scalars.prune != 0 && scalars.prune != 0.5)
    throw Error("--prune", fmt::format("the 2:4 pattern prunes half of every group of 4 (0.5); "
                                       "leave --prune out with --prune-pattern=2:4, got {}",
                                       scalars.prune));
  if (scalars.prune == 0 && !two_four) {
    if (scalars.prune_start != 1 || scalars.prune_end != 0 || scalars.prune_frequency != 10)
      throw Error("--prune", "--prune-start, --prune-end and --prune-frequency shape a pruning "
                             "schedule: give --prune SPARSITY or --prune-pattern=2:4");
    return "";
  }
  if (scalars.prune_end == 0)
    throw Error("--prune-end", "pruning needs the step its schedule ends at (kiln compile --train "
                               "has no run to take it from)");
  if (scalars.prune_end < scalars.prune_start)
    throw Error("--prune-end", fmt::format("the schedule ends at step {}, before it starts (--prune-start "
                                           "{})",
                                           scalars.prune_end, scalars.prune_start));
  std::string text = fmt::format(" prune_start={} prune_end={} prune_frequency={}",
                                 scalars.prune_start, scalars.prune_end, scalars.prune_frequency);
  return text + (two_four ? std::string(" prune_pattern=2:4")
                          : fmt::format(" prune_sparsity={}", scalars.prune));
}

std::string pruning_report(const std::map<std::string, ir::Tensor>& state) {
  int64_t zeros = 0, elements = 0;
  for (const auto& [name, tensor] : state) {
    if (!name.starts_with("prune.mask.")) continue;
    const std::vector<double> mask = tensor.to_doubles();
    for (double m : mask) zeros += m == 0;
    elements += static_cast<int64_t>(mask.size());
  }
  if (elements == 0) return "";
  return fmt::format("  sparsity {:.1f} %", 100.0 * static_cast<double>(zeros) /
                                                static_cast<double>(elements));
}

}  // namespace kiln::compiler
