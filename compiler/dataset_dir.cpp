// Loading datasets by --data SPEC (see dataset_dir.h).
#include "compiler/dataset_dir.h"

#include <filesystem>

#include "compiler/npy.h"
#include "ir/diagnostic.h"
#include "runtime/data/text.h"

namespace kiln::compiler {
namespace fs = std::filesystem;

data::Dataset load_npy_dataset_dir(const std::string& dir, data::Split split) {
  const std::string prefix = std::string(data::split_name(split));
  const fs::path x_path = fs::path(dir) / (prefix + ".x.npy");
  const fs::path y_path = fs::path(dir) / (prefix + ".y.npy");
  std::error_code ec;
  for (const fs::path& path : {x_path, y_path}) {
    if (!fs::is_regular_file(path, ec)) {
      throw Error(dir, "the " + prefix + " split needs " + x_path.filename().string() + " and " +
                           y_path.filename().string() + "; " + path.string() +
                           " does not exist (see docs/data.md for the layout)");
    }
  }
  const ir::Tensor x = read_npy(x_path.string());
  const ir::Tensor y = read_npy(y_path.string());
  data::Dataset dataset = data::dataset_from_tensors(x, x_path.string(), y, y_path.string());
  dataset.source = dir + " " + prefix;
  return dataset;
}

data::Dataset load_dataset(std::string_view spec, data::Split split, int64_t first,
                           int64_t context) {
  if (data::is_builtin_dataset(spec)) return data::load_builtin_dataset(spec, split, first);
  if (data::is_text_dataset(spec)) return data::load_text_dataset(spec, split, context);
  const std::string dir(spec);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error("--data", "'" + dir + "' is neither a known dataset (mnist, fashion-mnist, "
                          "fortunes), text:PATH, nor a directory of .npy files");
  }
  return load_npy_dataset_dir(dir, split);
}

}  // namespace kiln::compiler
