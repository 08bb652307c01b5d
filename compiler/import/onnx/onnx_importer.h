// The ONNX importer: model.onnx → ir::Graph plus weights, what the JSON frontend produces, so
// every command and the C++ API take an ONNX file directly (compiler/model_loader.cpp).
//
// Nodes are converted in file order through the op table (onnx_ops.h); anything computable at
// import — Constant, Shape, shape arithmetic, ops on initializers — is folded, so only run-time
// work reaches the graph. Initializers the graph still reads become parameters. Every node that
// cannot be converted is reported, all at once:
//   model.onnx: node 17 'Conv_3' (Conv, opset 13): error: ...
#pragma once

#include <map>
#include <memory>
#include <vector>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::compiler {

struct ImportOptions {
  // Sizes for inputs whose dims the model leaves symbolic ("batch"): name → full shape.
  std::map<std::string, ir::Shape> input_shapes;
  // When > 0, a symbolic dim of an input not in input_shapes takes this size (training sets the
  // batch size afterwards); 0: such a dim is an error that asks for --input-shape.
  int64_t symbolic_dim_size = 0;
  // Symbolic dims to keep dynamic (ir/dynamic_dims.h): dim_param name → bound (for Keras,
  // "batch": the None first dim). An input dim named so becomes a dynamic dim of the graph,
  // typed at its bound; one compile then serves every size up to it. Takes precedence over
  // symbolic_dim_size.
  std::map<std::string, int64_t> dim_bounds;
  // When > 0 (kiln serve): an input's symbolic dim 0 that dim_bounds does not name becomes a
  // dynamic dim with this bound, named by its dim_param (ONNX; "batch" when it has none) or
  // "batch" (Keras's None first dim).
  int64_t leading_dim_bound = 0;
  // The values `kiln run` is given for inputs: where an op needs an operand at import (a
  // Reshape's shape, Slice's starts, Clip's bounds) and the model computes it from an input,
  // the import specializes on this value. The input stays an input of the graph.
  std::map<std::string, ir::Tensor> input_values;
};

// Whether `bytes` look like a serialized ONNX ModelProto (checked by content, not extension).
bool looks_like_onnx(std::string_view bytes);

// The initializers of the ONNX model at `path`, for parameters whose source names the model
// file (ir::ExternalData{model.onnx, initializer name}: how printed IR refers to them).
class OnnxInitializers {
 public:
  // Parses the model once. Throws kiln::Error.
  static std::shared_ptr<const OnnxInitializers> open(const std::string& path);
  // The names of its initializers, and one's data (kiln::Error when it has none such).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  ir::Tensor read(const std::string& name) const;
  ~OnnxInitializers();

 private:
  struct Model;
  std::string path_;
  std::unique_ptr<Model> model_;
};

// Parses and converts a ModelProto. `display_name` appears in diagnostics; external data files
// resolve against `base_dir`. Parameter data is loaded (Value::data). Throws kiln::Error.
// `model_path` (absolute, or empty for standard input) is what parameters read from
// initializers name as their source.
ir::Graph import_onnx(const std::string& bytes, const std::string& display_name,
                      const std::string& base_dir, const ImportOptions& options = {},
                      const std::string& model_path = {});

}  // namespace kiln::compiler
