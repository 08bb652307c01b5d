// Parameter data: checking where each parameter's data comes from, and loading it.
#pragma once

#include "ir/graph.h"

namespace kiln::compiler {

// Checks every parameter's source without reading tensor data: initializer specs are
// normalized (ir::normalize_initializer), inline arrays have one value per element, and for
// safetensors sources the file exists and parses, holds the key, and the stored shape and
// dtype match the parameter. Errors are kiln::Error located at the parameter (Value::loc),
// e.g. "model.json: /parameters/2: error: parameter 'fc.weight': shape [10,64] in
// weights.safetensors does not match the declared f32[10,128]".
void check_parameter_sources(ir::Graph& graph);

// Materializes Value::data for every parameter that has none yet.
void load_parameter_data(ir::Graph& graph);

// Materializes Value::data only for the parameters read from files (safetensors, ONNX
// initializers, their external data): what a content hash of the model must read.
void load_file_parameter_data(ir::Graph& graph);

}  // namespace kiln::compiler
