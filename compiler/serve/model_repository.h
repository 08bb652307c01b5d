// The models `kiln serve` holds: one model file, or a model repository (a directory), loaded
// and unloaded by name.
//
// A repository is a directory; each of its entries is a model:
//   NAME.json, NAME.onnx, NAME.h5, NAME.kiln   a model file or package, served as NAME
//   NAME/                                      a directory with config.json and/or a model file
//     config.json   optional: {"model": "file", "max_batch": 8, "max_queue_delay_ms": 2,
//                   "instances": 1, "queue_timeout_ms": 30000, "dims": {"batch": 8},
//                   "input_shapes": {"x": [1, 3, 224, 224]}}
//     model.json | model.onnx | model.h5 | model.kiln   the model, unless config.json names one
// Settings a config leaves out come from the command line. Hidden entries (".x") are skipped.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/serve/served_model.h"

namespace kiln::serve {

// What the command line sets for every model.
struct ServeDefaults {
  compiler::PackageRequest request;     // pipeline, precision, library, archs, cache
  runtime::ExecutableOptions backend;
  ModelConfig config;
  compiler::ImportOptions import;       // --dim, --input-shape (a single model file only)
};

struct RepositoryEntry {
  std::string name;
  std::string model;   // its file
  std::string config;  // its config.json, or ""
};

struct ModelStatus {
  std::string name;
  std::string state;   // "READY", "UNAVAILABLE"
  std::string reason;  // why it is unavailable
};

class ModelRepository {
 public:
  // `root`: a model file or package (a repository of one), or a repository directory.
  ModelRepository(std::string root, ServeDefaults defaults, Metrics& metrics);
  ~ModelRepository();

  // The repository's models as the files are now. Throws kiln::Error for an unreadable root.
  std::vector<RepositoryEntry> scan() const;
  // Loads (or reloads) model `name`: kiln::Error for a bad model or config, RequestError(404)
  // for a name the repository does not hold. Serialized: one load at a time.
  void load(const std::string& name);
  // Stops model `name` after its queued requests; RequestError(404) when it is not loaded.
  void unload(const std::string& name);
  // The loaded model, or nullptr.
  std::shared_ptr<ServedModel> find(const std::string& name) const;
  std::vector<ModelStatus> index() const;
  std::vector<std::shared_ptr<ServedModel>> loaded() const;
  // Drains and stops every model.
  void stop_all();

 private:
  std::string root_;
  bool single_file_ = false;
  ServeDefaults defaults_;
  Metrics& metrics_;
  std::mutex load_mutex_;           // one load or unload at a time
  mutable std::mutex models_mutex_;  // guards models_ and failures_
  std::map<std::string, std::shared_ptr<ServedModel>> models_;
  std::map<std::string, std::string> failures_;  // name → why its last load failed
};

}  // namespace kiln::serve
