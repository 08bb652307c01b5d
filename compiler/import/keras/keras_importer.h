// The Keras importer: a Keras model → ir::Graph plus weights, what the JSON frontend produces, so
// every command takes a Keras file directly (compiler/model_loader.cpp). It reads
//   - a Keras model's JSON (`model.to_json()`: {"class_name": "Sequential" | "Functional" |
//     "Model", "config": ...}, Keras 2, Keras 3 and TensorFlow.js spellings); without weights,
//     parameters take the layers' initializers, so the model can be trained from scratch;
//   - the TensorFlow.js layers format: model.json with `modelTopology` and `weightsManifest`,
//     weights in the .bin shards beside it;
//   - Keras HDF5 files: whole models (.h5 with the model_config attribute), and weights alone
//     (.h5 from save_weights, Keras 3's .weights.h5) for a model JSON `NAME.json` that has
//     `NAME.weights.h5` or `NAME.h5` beside it.
// All are recognized by content (detect_keras, the HDF5 signature), not by extension.
//
// Layout: Keras is channels_last (NHWC), kiln's convolutions are NCHW. The whole graph runs in
// NCHW: a 4-D input is transposed once after the input, a 4-D output once before the output,
// conv kernels are stored OIHW, and a Dense layer after Flatten has its weight rows permuted
// (from Keras's h,w,c order to c,h,w) so that no transpose runs before it. The user feeds NHWC
// input, as to Keras. Every layer that cannot be imported is reported, all at once:
//   model.json: layer 3 'lstm_1' (LSTM): error: layer LSTM is not supported
#pragma once

#include <string>
#include <string_view>

#include "compiler/import/onnx/onnx_importer.h"  // ImportOptions, shared by the importers
#include "ir/graph.h"

namespace kiln::compiler {

enum class KerasFormat { None, ModelJson, TfjsLayers };

// What `text` is: a Keras model JSON, a TensorFlow.js layers model.json, or neither (checked by
// content: a JSON object with modelTopology (and weightsManifest, when it has weights), or with
// class_name and config). Cheap: only the top-level keys are looked at.
KerasFormat detect_keras(std::string_view text);

// Parses and converts. `display_name` appears in diagnostics; weight shards resolve against
// `base_dir`; `model_path` (empty for standard input) finds a model JSON's HDF5 weights beside
// it. Parameter data is loaded (Value::data). Throws kiln::Error.
ir::Graph import_keras(std::string_view text, const std::string& display_name,
                       const std::string& base_dir, const ImportOptions& options = {},
                       const std::string& model_path = {});

// Whether `head` (a file's first bytes) is an HDF5 file.
bool looks_like_keras_hdf5(std::string_view head);

// A Keras HDF5 file at `path`: a whole model (the model_config attribute and its weights).
// Throws kiln::Error (a weights-only file names the model JSON it needs).
ir::Graph import_keras_hdf5(const std::string& path, const std::string& display_name,
                            const ImportOptions& options = {});

}  // namespace kiln::compiler
