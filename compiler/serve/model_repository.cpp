#include "compiler/serve/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "compiler/json_text.h"
#include "ir/diagnostic.h"

namespace kiln::serve {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kModelExtensions[] = {".json", ".onnx", ".h5", ".kiln"};

bool is_model_extension(const fs::path& path) {
  return std::find(std::begin(kModelExtensions), std::end(kModelExtensions), path.extension().string()) !=
         std::end(kModelExtensions);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(path, "cannot read the file");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

int64_t positive_integer(const json& value, const std::string& file, const std::string& pointer) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1)
    throw Error(file + ": " + pointer, "must be an integer >= 1, got " + compiler::describe_json(value));
  return value.get<int64_t>();
}

double non_negative_number(const json& value, const std::string& file, const std::string& pointer) {
  if (!value.is_number() || value.get<double>() < 0)
    throw Error(file + ": " + pointer, "must be a number >= 0, got " + compiler::describe_json(value));
  return value.get<double>();
}

// A model directory's config.json applied over the command line's settings.
void apply_config(const std::string& path, const fs::path& directory, std::string& model, ModelConfig& config,
                  compiler::ImportOptions& import) {
  const json root = compiler::parse_json_text(read_text(path), path, compiler::JsonLocation::LineColumn, "not valid JSON");
  if (!root.is_object()) throw Error(path, "a model config must be a JSON object");
  for (const auto& [key, value] : root.items()) {
    const std::string pointer = "/" + key;
    if (key == "model") {
      if (!value.is_string() || value.get<std::string>().empty())
        throw Error(path + ": " + pointer, "must name the model file, relative to " + directory.string());
      model = (directory / value.get<std::string>()).string();
    } else if (key == "max_batch") {
      config.max_batch = positive_integer(value, path, pointer);
    } else if (key == "instances") {
      config.instances = static_cast<int>(std::min<int64_t>(positive_integer(value, path, pointer), 64));
    } else if (key == "max_queue_delay_ms") {
      config.max_queue_delay_ms = non_negative_number(value, path, pointer);
    } else if (key == "queue_timeout_ms") {
      config.queue_timeout_ms = non_negative_number(value, path, pointer);
    } else if (key == "dims") {
      if (!value.is_object()) throw Error(path + ": " + pointer, "must map dim names to bounds, e.g. {\"batch\": 8}");
      for (const auto& [dim, bound] : value.items())
        import.dim_bounds[dim] = positive_integer(bound, path, pointer + "/" + dim);
    } else if (key == "input_shapes") {
      if (!value.is_object()) throw Error(path + ": " + pointer, "must map input names to shapes, e.g. {\"x\": [1, 784]}");
      for (const auto& [input, shape] : value.items()) {
        if (!shape.is_array()) throw Error(path + ": " + pointer + "/" + input, "must be an array of dims");
        ir::Shape dims;
        for (size_t d = 0; d < shape.size(); ++d)
          dims.push_back(positive_integer(shape[d], path, fmt::format("{}/{}/{}", pointer, input, d)));
        import.input_shapes[input] = dims;
      }
    } else {
      throw Error(path + ": " + pointer, "unknown setting '" + key +
                                              "'; expected model, max_batch, max_queue_delay_ms, instances, "
                                              "queue_timeout_ms, dims or input_shapes");
    }
  }
}

bool valid_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

ModelRepository::ModelRepository(std::string root, ServeDefaults defaults, Metrics& metrics)
    : root_(std::move(root)), defaults_(std::move(defaults)), metrics_(metrics) {
  std::error_code ec;
  single_file_ = !fs::is_directory(root_, ec);
  if (!fs::exists(root_, ec)) throw Error(root_, "no such model file or repository directory");
}

ModelRepository::~ModelRepository() { stop_all(); }

std::vector<RepositoryEntry> ModelRepository::scan() const {
  if (single_file_) return {{fs::path(root_).stem().string(), root_, ""}};
  std::vector<RepositoryEntry> entries;
  std::error_code ec, ignored;  // `ignored`: a file that vanishes or cannot be stat'ed is no model
  for (const fs::directory_entry& item : fs::directory_iterator(root_, ec)) {
    const fs::path path = item.path();
    const std::string file = path.filename().string();
    if (file.empty() || file[0] == '.') continue;
    if (item.is_directory(ignored)) {
      RepositoryEntry entry{file, "", ""};
      if (fs::is_regular_file(path / "config.json", ignored)) entry.config = (path / "config.json").string();
      for (const char* extension : kModelExtensions)
        if (entry.model.empty() && fs::is_regular_file(path / (std::string("model") + extension), ignored))
          entry.model = (path / (std::string("model") + extension)).string();
      if (!entry.model.empty() || !entry.config.empty()) entries.push_back(entry);
    } else if (item.is_regular_file(ignored) && is_model_extension(path)) {
      entries.push_back({path.stem().string(), path.string(), ""});
    }
  }
  if (ec) throw Error(root_, "cannot read the repository directory: " + ec.message());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return entries;
}

void ModelRepository::load(const std::string& name) {
  std::lock_guard load_lock(load_mutex_);
  const std::vector<RepositoryEntry> entries = scan();
  auto entry = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.name == name; });
  if (entry == entries.end()) throw RequestError(404, "the repository " + root_ + " has no model '" + name + "'");
  try {
    if (!valid_name(name))
      throw Error(entry->model.empty() ? entry->config : entry->model,
                  "a model's name may hold letters, digits, '_', '-' and '.' only");
    compiler::PackageRequest request = defaults_.request;
    ModelConfig config = defaults_.config;
    compiler::ImportOptions import = single_file_ ? defaults_.import : compiler::ImportOptions{};
    std::string model = entry->model;
    if (!entry->config.empty()) apply_config(entry->config, fs::path(entry->config).parent_path(), model, config, import);
    if (model.empty())
      throw Error(entry->config, "names no model, and the directory has no model.json, model.onnx, model.h5 or model.kiln");
    // An ONNX or Keras model's symbolic leading dim, unless sized otherwise, becomes the
    // dynamic batch that requests are merged along.
    if (import.dim_bounds.empty() && import.input_shapes.empty()) import.leading_dim_bound = config.max_batch;
    request.model = model;
    request.import = import;
    std::shared_ptr<ServedModel> loaded = ServedModel::load(name, request, defaults_.backend, config, metrics_);
    std::shared_ptr<ServedModel> previous;
    {
      std::lock_guard lock(models_mutex_);
      previous = std::exchange(models_[name], loaded);
      failures_.erase(name);
    }
    if (previous) previous->stop();  // a reload: the old instances finish what they hold
  } catch (const Error& error) {
    std::lock_guard lock(models_mutex_);
    failures_[name] = error.what();
    throw;
  }
}

void ModelRepository::unload(const std::string& name) {
  std::lock_guard load_lock(load_mutex_);
  std::shared_ptr<ServedModel> model;
  {
    std::lock_guard lock(models_mutex_);
    auto it = models_.find(name);
    if (it == models_.end()) throw RequestError(404, "model '" + name + "' is not loaded");
    model = it->second;
    models_.erase(it);
  }
  model->stop();
}

std::shared_ptr<ServedModel> ModelRepository::find(const std::string& name) const {
  std::lock_guard lock(models_mutex_);
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second;
}

std::vector<ModelStatus> ModelRepository::index() const {
  std::vector<ModelStatus> list;
  const std::vector<RepositoryEntry> entries = scan();
  std::lock_guard lock(models_mutex_);
  for (const RepositoryEntry& entry : entries) {
    ModelStatus status{entry.name, models_.count(entry.name) ? "READY" : "UNAVAILABLE", ""};
    auto failure = failures_.find(entry.name);
    if (!models_.count(entry.name)) status.reason = failure != failures_.end() ? failure->second : "unloaded";
    list.push_back(status);
  }
  return list;
}

std::vector<std::shared_ptr<ServedModel>> ModelRepository::loaded() const {
  std::lock_guard lock(models_mutex_);
  std::vector<std::shared_ptr<ServedModel>> list;
  for (const auto& [name, model] : models_) list.push_back(model);
  return list;
}

void ModelRepository::stop_all() {
  for (const std::shared_ptr<ServedModel>& model : loaded()) model->stop();
}

}  // namespace kiln::serve
