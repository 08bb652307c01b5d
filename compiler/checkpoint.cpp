#include "compiler/checkpoint.h"

#include <fmt/format.h>

#include <optional>

#include "ir/diagnostic.h"
#include "ir/float_storage.h"

namespace kiln::compiler {

void check_resume_settings(const SafetensorsFile& file,
                           const std::map<std::string, std::string>& settings) {
  static const std::map<std::string, std::string> kFlags = {
      {"kiln.batch_size", "--batch-size"}, {"kiln.data", "--data"},
      {"kiln.train_samples", "the number of training samples (--train-samples)"},
      {"kiln.seed", "--seed"}, {"kiln.ranks", "the number of ranks (mpirun -np)"}};
  for (const auto& [key, value] : settings) {
    auto it = file.metadata().find(key);
    if (it == file.metadata().end() || it->second == value) continue;
    throw Error(file.path(), fmt::format("the checkpoint was trained with {} {}, this run has {}; "
                                         "resume with the same settings",
                                         kFlags.at(key), escape_for_message(it->second), value));
  }
}

std::map<std::string, ir::Tensor> checkpoint_tensors(std::map<std::string, ir::Tensor> state,
                                                     ir::DType weights_dtype,
                                                     const std::string& checkpoint) {
  if (weights_dtype == ir::DType::F32) return state;
  for (auto& [name, tensor] : state) {
    if (name.starts_with("optimizer.") || name.starts_with("train.")) continue;
    std::string error;
    std::optional<ir::Tensor> narrowed = ir::narrowed_for_storage(tensor, weights_dtype, &error);
    if (!narrowed)
      throw Error(checkpoint, fmt::format("--weights-dtype={}: parameter '{}': {}",
                                          ir::dtype_name(weights_dtype), name, error));
    tensor = std::move(*narrowed);
  }
  return state;
}

}  // namespace kiln::compiler
