#include "codegen/precision.h"

namespace kiln::codegen {

std::string_view precision_name(Precision precision) {
  return precision == Precision::Tf32 ? "tf32" : "f32";
}

std::optional<Precision> parse_precision(std::string_view text) {
  if (text == "f32") return Precision::F32;
  if (text == "tf32") return Precision::Tf32;
  return std::nullopt;
}

}  // namespace kiln::codegen
