// Loading a model from any of the forms a user may hand kiln: a JSON model (.json), an ONNX model
// (detected by content: a serialized ModelProto), a Keras model (detected by content: a Keras
// model JSON or a TensorFlow.js model.json), textual IR (any other file), or "-" for standard
// input (JSON when it starts with '{').
#pragma once

#include <string>

#include "compiler/import/onnx/onnx_importer.h"
#include "ir/graph.h"

namespace kiln::compiler {

// Parses (or imports), checks parameter sources and verifies. `options` size the dims an
// imported model leaves symbolic. Throws kiln::Error.
ir::Graph load_model(const std::string& path, const ImportOptions& options = {});

// Whether the file at `path` is an ONNX model (by content).
bool is_onnx_file(const std::string& path);

// Whether the file at `path` is a Keras model JSON or TensorFlow.js model.json (by content).
bool is_keras_file(const std::string& path);

// Whether the file at `path` is imported (ONNX or Keras): its input shapes may be left open and
// given by --input-shape or the inputs of `kiln run`.
bool is_imported_model(const std::string& path);

}  // namespace kiln::compiler
