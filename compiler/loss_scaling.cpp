#include "compiler/loss_scaling.h"

#include <fmt/format.h>

#include <cmath>

#include "ir/diagnostic.h"

namespace kiln::compiler {

std::string loss_scaling_options(const StepScalarFlags& scalars, codegen::Precision precision) {
  const std::string& mode = scalars.loss_scale;
  if (mode != "auto" && mode != "dynamic" && mode != "none")
    throw Error("--loss-scale", "expected auto, dynamic or none, got '" + mode + "'");
  const bool dynamic = mode == "dynamic" || (mode == "auto" && precision == codegen::Precision::F16);
  if (!dynamic) {
    if (scalars.loss_scale_init != 65536 || scalars.loss_scale_growth_interval != 2000)
      throw Error("--loss-scale", "--loss-scale-init and --loss-scale-growth-interval shape "
                                  "dynamic loss scaling, which is on with --precision=f16 or "
                                  "--loss-scale=dynamic");
    return "";
  }
  if (!(scalars.loss_scale_init > 0) || std::isinf(scalars.loss_scale_init) ||
      scalars.loss_scale_init > 3.4e38)
    throw Error("--loss-scale-init", fmt::format("must be a finite f32 > 0, got {}",
                                                 scalars.loss_scale_init));
  if (scalars.loss_scale_growth_interval < 1)
    throw Error("--loss-scale-growth-interval",
                fmt::format("must be >= 1, got {}", scalars.loss_scale_growth_interval));
  return fmt::format(" loss_scale={} loss_scale_growth_interval={}", scalars.loss_scale_init,
                     scalars.loss_scale_growth_interval);
}

std::string loss_scaling_report(const std::map<std::string, ir::Tensor>& state) {
  const auto scale = state.find("train.loss_scale");
  const auto skipped = state.find("train.loss_scale.skipped");
  if (scale == state.end() || skipped == state.end()) return "";
  const auto count = static_cast<int64_t>(skipped->second.get(0));
  return fmt::format("  loss scale {:g}, {} step{} skipped", scale->second.get(0), count,
                     count == 1 ? "" : "s");
}

}  // namespace kiln::compiler
