// The fixed prologue of every translation unit: element types and device helper functions.
#pragma once

#include <string_view>

namespace kiln::codegen {

// Text placed after the includes of every emitted translation unit.
std::string_view device_library();

// ir/scalar_math.h, the functions the op table's scalar expressions call (T = float in kernels),
// placed after device_library().
std::string scalar_math_library();

}  // namespace kiln::codegen
