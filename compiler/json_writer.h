// ir::Graph → the kiln JSON model format (docs/model-format.md), with the parameters' data in a
// safetensors file beside it: what `kiln import` writes for people to read and edit. The JSON
// frontend reads it back to the same graph.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::compiler {

// Writes `json_path` and `weights_path` (every parameter's data must be loaded). The JSON names
// the weights file relative to its own folder. Throws kiln::Error when a file cannot be written.
void write_json_model(const ir::Graph& graph, const std::string& json_path,
                      const std::string& weights_path);

}  // namespace kiln::compiler
