// The JSON model frontend: model.json → a verified ir::Graph.
//
// The format is documented in docs/model-format.md (schema: docs/model.schema.json). Every
// problem is a kiln::Error located by file and JSON pointer and naming the node:
//   model.json: /nodes/3/inputs/1: error: conv2d 'conv1': weight has 3 input channels ...
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::compiler {

inline constexpr std::string_view kModelFormat = "kiln.model";
inline constexpr int kModelFormatVersion = 1;

// Parses and checks a model from its text (compiler/model_loader.h reads the file). Parameter
// sources are checked (weights files opened, keys and shapes matched) but tensor data is not
// loaded: see compiler/parameters.h. `display_name` appears in diagnostics; relative weight
// paths resolve against `base_dir`.
ir::Graph parse_json_model(std::string_view text, const std::string& display_name,
                           const std::string& base_dir);

}  // namespace kiln::compiler
