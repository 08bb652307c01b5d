#include "compiler/model_loader.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "compiler/file_kind.h"
#include "compiler/import/keras/keras_importer.h"
#include "compiler/json_frontend.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace kiln::compiler {

namespace {
bool looks_like_json(const std::string& text) {
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    return c == '{';
  }
  return false;
}
}  // namespace

bool is_onnx_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[2] = {};
  return in.read(head, 2) && looks_like_onnx(std::string_view(head, 2));
}

bool is_keras_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char head[8] = {};
  if (in.read(head, 8) && looks_like_keras_hdf5(std::string_view(head, 8))) return true;
  in.clear();
  in.seekg(0);
  // The top-level keys of a model.json come first; a weights manifest may follow a long
  // topology, so the whole file is scanned (it is JSON text, read again by the import).
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return detect_keras(buffer.str()) != KerasFormat::None;
}

bool is_imported_model(const std::string& path) { return is_onnx_file(path) || is_keras_file(path); }

ir::Graph load_model(const std::string& path, const ImportOptions& options) {
  std::string text;
  std::string display = path;
  std::string base_dir = ".";
  if (path == "-") {
    display = "<stdin>";
    std::ostringstream buffer;
    buffer << std::cin.rdbuf();
    text = buffer.str();
  } else {
    check_readable_file(path, "a model file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, "cannot open the model file (" + std::string(std::strerror(errno)) + ")");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
    const std::string parent = std::filesystem::path(path).parent_path().string();
    if (!parent.empty()) base_dir = parent;
  }
  if (looks_like_onnx(text) || (path.ends_with(".onnx") && !looks_like_json(text)))
    return import_onnx(text, display, base_dir, options,
                       path == "-" ? std::string() : std::filesystem::absolute(path).lexically_normal().string());
  if (looks_like_json(text) && detect_keras(text) != KerasFormat::None)
    return import_keras(text, display, base_dir, options, path == "-" ? std::string() : path);
  if (looks_like_keras_hdf5(text)) {
    if (path == "-") throw Error(display, "a Keras HDF5 model must be given as a file, not on standard input");
    return import_keras_hdf5(path, display, options);
  }
  if (!looks_like_json(text)) {
    if (auto foreign = detect_foreign_format(text, path)) {
      std::string message = "this looks like " + foreign->description +
                            ", not a kiln model (JSON, docs/model-format.md, or textual IR)";
      throw Error(display, message);
    }
  }
  const bool json = path.ends_with(".json") || (!path.ends_with(".ir") && looks_like_json(text));
  if (json) return parse_json_model(text, display, base_dir);
  ir::Graph graph = ir::parse_graph(text, display, base_dir);
  check_parameter_sources(graph);
  ir::verify(graph);
  return graph;
}

}  // namespace kiln::compiler
