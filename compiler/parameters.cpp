// Parameter data: checking each parameter's source and materializing it.
//
// Checking reads only safetensors headers, so `kiln opt` can validate a model against a large
// weights file cheaply; loading repeats the same checks (a graph may be loaded without having
// been checked) and then reads the data. Open files are cached per call: a model usually keeps
// all its weights in one file, whose header is parsed once.
#include "compiler/parameters.h"

#include <cmath>
#include <filesystem>
#include <map>

#include "compiler/import/onnx/onnx_importer.h"
#include "compiler/model_loader.h"
#include "compiler/safetensors.h"
#include "compiler/tensor_file_util.h"
#include "ir/diagnostic.h"
#include "ir/float_storage.h"
#include "ir/initializer.h"
#include "ir/op_registry.h"

namespace kiln::compiler {
namespace {

constexpr size_t kKeysListed = 5;  // available keys shown when a key is missing

using FileCache = std::map<std::string, SafetensorsFile>;
// ONNX models whose initializers parameters name (the importer's parameters, printed as IR).
using OnnxCache = std::map<std::string, std::shared_ptr<const OnnxInitializers>>;

[[noreturn]] void fail(const ir::Value& param, const std::string& message,
                       std::string_view sub = {}, std::vector<std::string> notes = {}) {
  throw Error(Diagnostic{param.loc.render(sub), "parameter '" + param.name + "': " + message,
                         std::move(notes)});
}

std::string file_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

const SafetensorsFile& open_cached(const ir::Value& param, const std::string& path,
                                   FileCache& cache) {
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error))
    fail(param, "weights file '" + path + "' not found");
  try {
    return cache.emplace(path, SafetensorsFile::open(path)).first->second;
  } catch (const Error& inner) {
    fail(param, "weights file '" + path + "': " + inner.diagnostic().message);
  }
}

// "'a', 'b', 'c', 'd', 'e' and 7 more" — enough to show how the file names things.
std::string some_keys(const SafetensorsFile& file) {
  std::string out;
  size_t shown = 0;
  for (const auto& [name, entry] : file.entries()) {
    if (shown == kKeysListed) break;
    out += (shown++ ? ", '" : "'") + name + "'";
  }
  if (file.entries().size() > shown)
    out += " and " + std::to_string(file.entries().size() - shown) + " more";
  return out;
}

// Checks the file holds `key` with the parameter's shape and a compatible dtype.
const SafetensorsEntry& check_external(const ir::Value& param, const ir::ExternalData& source,
                                       FileCache& cache) {
  const SafetensorsFile& file = open_cached(param, source.path, cache);
  const SafetensorsEntry* entry = file.find(source.key);
  const std::string in_file = " in " + file_name(source.path);
  if (entry == nullptr) {
    std::vector<std::string> keys;
    for (const auto& [name, unused] : file.entries()) keys.push_back(name);
    std::string message = "no tensor '" + source.key + "'" + in_file;
    if (auto hint = ir::closest_name(source.key, keys)) message += "; did you mean '" + *hint + "'?";
    std::vector<std::string> notes;
    if (keys.empty())
      notes.push_back(file_name(source.path) + " holds no tensors");
    else
      notes.push_back(file_name(source.path) + " holds " + some_keys(file));
    fail(param, message, {}, std::move(notes));
  }
  // F64 data rounds to an f32, f16 or bf16 parameter, and bf16 or f16 data widens exactly to an
  // f32 one (--weights-dtype; load_external); no other conversion is implicit.
  const bool widens = (entry->type.dtype == ir::DType::BF16 || entry->type.dtype == ir::DType::F16) &&
                      param.type.dtype == ir::DType::F32;
  const bool dtype_ok = entry->type.dtype == param.type.dtype || widens ||
                        (entry->type.dtype == ir::DType::F64 && ir::is_floating(param.type.dtype));
  const bool shape_ok = entry->type.shape == param.type.shape;
  const std::string declared = " does not match the declared " + param.type.to_string();
  if (!dtype_ok && !shape_ok)
    fail(param, "stored " + entry->stored_dtype + ir::shape_to_string(entry->type.shape) +
                    in_file + declared);
  if (!dtype_ok) fail(param, "dtype " + entry->stored_dtype + in_file + declared);
  if (!shape_ok) fail(param, "shape " + ir::shape_to_string(entry->type.shape) + in_file + declared);
  return *entry;
}

// Inline values must be one per element and, for integer and bool parameters, exact.
void check_inline(const ir::Value& param, const ir::InlineData& source) {
  const int64_t needed = ir::num_elements(param.type.shape);
  if (static_cast<int64_t>(source.values.size()) != needed)
    fail(param, "inline data has " + std::to_string(source.values.size()) + " value" +
                    (source.values.size() == 1 ? "" : "s") + ", but " + param.type.to_string() +
                    " needs " + std::to_string(needed));
  if (ir::is_floating(param.type.dtype)) return;
  for (size_t i = 0; i < source.values.size(); ++i) {
    const double value = source.values[i];
    const bool fits = param.type.dtype == ir::DType::Bool ? value == 0 || value == 1
                                                          : ir::fits_dtype(value, param.type.dtype);
    if (fits) continue;
    fail(param, "inline value " + std::to_string(i) + " (" + ir::float_to_string(value) +
                    ") is not representable in " + param.type.to_string());
  }
}

void check_initializer(ir::Value& param, ir::InitializerSpec& spec) {
  try {
    ir::normalize_initializer(spec, param.type);
  } catch (const ir::OpError& error) {
    fail(param, error.message, error.attr.empty() ? "/init" : "/init/" + error.attr);
  }
}

// A parameter read from an ONNX model's initializer: the model parses once per cache.
const OnnxInitializers* onnx_source(const ir::Value& param, const ir::ExternalData& source, OnnxCache& cache) {
  if (auto it = cache.find(source.path); it != cache.end()) return it->second.get();
  if (!is_onnx_file(source.path)) return nullptr;
  try {
    const OnnxInitializers& model = *cache.emplace(source.path, OnnxInitializers::open(source.path)).first->second;
    return &model;
  } catch (const Error& inner) {
    fail(param, inner.diagnostic().message);
  }
}

ir::Tensor read_onnx_initializer(const ir::Value& param, const ir::ExternalData& source,
                                 const OnnxInitializers& model) {
  if (!model.contains(source.key)) {
    std::string message = "no initializer '" + source.key + "' in " + file_name(source.path);
    if (auto hint = ir::closest_name(source.key, model.names())) message += "; did you mean '" + *hint + "'?";
    fail(param, message);
  }
  try {
    ir::Tensor tensor = model.read(source.key);
    if (tensor.type() != param.type)
      fail(param, "initializer '" + source.key + "' in " + file_name(source.path) + " is " +
                      tensor.type().to_string() + ", declared " + param.type.to_string());
    return tensor;
  } catch (const Error& inner) {
    fail(param, inner.diagnostic().message);
  }
}

// Checks one parameter's source; returns its safetensors entry for external data.
const SafetensorsEntry* check_source(ir::Value& param, FileCache& cache, OnnxCache& onnx) {
  KILN_CHECK(param.source.has_value()) << "parameter '" << param.name << "' has no source";
  if (auto* spec = std::get_if<ir::InitializerSpec>(&*param.source)) {
    check_initializer(param, *spec);
    return nullptr;
  }
  if (auto* inline_data = std::get_if<ir::InlineData>(&*param.source)) {
    check_inline(param, *inline_data);
    return nullptr;
  }
  const auto& external = std::get<ir::ExternalData>(*param.source);
  if (const OnnxInitializers* model = onnx_source(param, external, onnx)) {
    read_onnx_initializer(param, external, *model);
    return nullptr;
  }
  return &check_external(param, external, cache);
}

ir::Tensor load_external(const ir::Value& param, const ir::ExternalData& source,
                         const FileCache& cache) {
  try {
    return ir::widened_from_storage(
        conform_input(cache.at(source.path).read(source.key), param.type, source.path,
                      "tensor '" + escape_for_message(source.key) + "': "),
        param.type);
  } catch (const Error& inner) {
    fail(param, "weights file '" + source.path + "': " + inner.diagnostic().message);
  }
}

}  // namespace

void check_parameter_sources(ir::Graph& graph) {
  FileCache cache;
  OnnxCache onnx;
  for (ir::Value* param : graph.parameters) check_source(*param, cache, onnx);
}

namespace {

// Materializes Value::data for the parameters without data for which `wanted` holds.
template <typename Wanted>
void load_data_where(ir::Graph& graph, Wanted wanted) {
  FileCache cache;
  OnnxCache onnx;
  for (ir::Value* param : graph.parameters) {
    if (param->data || !wanted(*param)) continue;
    if (const auto* external = std::get_if<ir::ExternalData>(&*param->source))
      if (const OnnxInitializers* model = onnx_source(*param, *external, onnx)) {
        param->data = std::make_shared<const ir::Tensor>(read_onnx_initializer(*param, *external, *model));
        continue;
      }
    check_source(*param, cache, onnx);
    ir::Tensor tensor;
    if (const auto* spec = std::get_if<ir::InitializerSpec>(&*param->source))
      tensor = ir::materialize_initializer(*spec, param->type);
    else if (const auto* inline_data = std::get_if<ir::InlineData>(&*param->source))
      tensor = ir::Tensor::from_doubles(param->type, inline_data->values);
    else
      tensor = load_external(*param, std::get<ir::ExternalData>(*param->source), cache);
    KILN_CHECK(tensor.type() == param->type)
        << "loaded " << tensor.type().to_string() << " for parameter '" << param->name
        << "' of type " << param->type.to_string();
    param->data = std::make_shared<const ir::Tensor>(std::move(tensor));
  }
}

}  // namespace

void load_parameter_data(ir::Graph& graph) {
  load_data_where(graph, [](const ir::Value&) { return true; });
}

void load_file_parameter_data(ir::Graph& graph) {
  load_data_where(graph, [](const ir::Value& param) {
    return param.source && std::holds_alternative<ir::ExternalData>(*param.source);
  });
}

}  // namespace kiln::compiler
