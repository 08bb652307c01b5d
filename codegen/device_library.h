// The fixed prologue of every translation unit: element types and device helper functions.
#pragma once

#include <string_view>

namespace kiln::codegen {

// Text placed after the includes of every emitted translation unit.
std::string_view device_library();

}  // namespace kiln::codegen
