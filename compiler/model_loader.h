// Loading a model from any of the forms a user may hand kiln: a JSON model (.json), textual IR
// (any other file), or "-" for standard input (JSON when it starts with '{').
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::compiler {

// Parses, checks parameter sources and verifies. Throws kiln::Error.
ir::Graph load_model(const std::string& path);

}  // namespace kiln::compiler
