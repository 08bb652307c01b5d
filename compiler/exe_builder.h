// `kiln compile --emit=exe`: a standalone program — a generated main, libkiln.a and the package
// embedded in the binary — that reads inputs from .npy and writes outputs as .npy.
#pragma once

#include <string>

#include "runtime/package/package.h"

namespace kiln::compiler {

// The generated main: its --help names the model's inputs and outputs.
std::string standalone_main_source(const runtime::Package& package, const std::string& program_name);

// Compiles the main with the host C++ compiler, embeds `package_bytes` (assembler .incbin)
// and links libkiln.a (next to the kiln tool in a build tree, or in ../lib when installed),
// writing `output` (renamed into place). Throws kiln::Error with the compiler's output.
void build_standalone_executable(const runtime::Package& package, const std::string& package_bytes,
                                 const std::string& output, bool verbose);

}  // namespace kiln::compiler
