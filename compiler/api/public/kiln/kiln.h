// kiln's C++ API: load a compiled package (or compile a model), bind inputs, run, take a
// training step, read outputs. Installed as <kiln/kiln.h>; link with kiln::kiln
// (`find_package(kiln)`, see examples/embed/ and docs/api.md).
//
//   kiln::Model model = kiln::Model::load("mnist.kiln");       // or "mnist_cnn.json"
//   model.set_input("image", kiln::read_npy("image.npy"));
//   model.run();
//   kiln::write_npy("probs.npy", model.output("probs"));
//
// Errors are exceptions, one type: every failure (a bad package or model, a missing input, an
// input of the wrong type, no GPU for Backend::Cuda) throws kiln::Error (<kiln/error.h>), whose
// what() is the one-line diagnostic the `kiln` tool prints, location first.
// A Model is not thread-safe: one run or step at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/error.h"

namespace kiln {

namespace api {
class ModelFactory;  // kiln's side of the API (compiler/api/api_internal.h)
}

// Element types, as in kiln's IR ("f32", "i32", ...).
enum class DType { F32, F16, BF16, I32, I64, Bool, F64, I8, U8, I16, U16, U32, U64 };
std::string_view dtype_name(DType dtype);

// A dense, row-major tensor in host memory.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);  // zero-filled
  static Tensor from_floats(std::vector<int64_t> shape, const std::vector<float>& values);
  static Tensor from_ints(std::vector<int64_t> shape, const std::vector<int32_t>& values);  // i32

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }
  size_t byte_size() const { return bytes_.size(); }
  std::string type_string() const;  // "f32[1,10]"
  // The elements as floats (f32 only; kiln::Error otherwise).
  std::vector<float> to_floats() const;

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> bytes_;
};

// Tensor data in memory someone else owns (a NumPy array, a PyTorch tensor): read during the
// call it is given to, never kept.
struct TensorRef {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // the elements, dense and row-major
};

// NumPy .npy files (little-endian, C order; the dtypes above).
Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& tensor);  // via a temporary file

enum class Backend {
  Auto,  // the GPU when there is one, else the host backend
  Host,  // the generated CUDA kernels on the CPU (compiled once into the kernel cache)
  Cuda,  // the GPU, through the driver API
};

struct Options {
  Backend backend = Backend::Auto;
  bool use_cache = true;  // the kernel and package caches ($KILN_CACHE_DIR, else ~/.cache/kiln)
  // Compiling a model file (not a package):
  int opt_level = 1;                                    // 0: no passes
  std::vector<std::string> archs = {"sm_80", "sm_90"};  // cubins to build
  int64_t train_batch_size = 0;  // > 0: also compile a training step at this batch size
  std::string optimizer = "optimizer=adam lr=0.001";    // its optimizer (append-optimizer's options)
  std::string precision = "f32";  // the GEMMs' arithmetic: f32 (exact) or tf32 (--precision)
  // An imported model's (ONNX, Keras) symbolic dims: an input's whole shape, by input name
  // (--input-shape), or a dim kept dynamic up to a bound, by dim name (--dim batch=64).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  std::map<std::string, int64_t> dynamic_dims;
};

// Model::fit's settings: those of `kiln train` (docs/training.md).
struct FitOptions {
  int64_t epochs = 1;
  int64_t batch_size = 64;       // samples per step; an epoch's last partial batch is dropped
  std::string optimizer = "adam";  // sgd, adam, adamw
  double lr = 1e-3;
  double momentum = 0;           // sgd
  double weight_decay = -1;      // < 0: the optimizer's default
  uint64_t seed = 0;             // shuffling and dropout
  // Evaluated after every epoch when set (both, with the same sample count).
  Tensor validation_x, validation_y;
  std::string checkpoint;        // written after every epoch (.safetensors)
  std::string resume;            // a checkpoint to continue from
  bool progress = true;          // a progress bar per epoch and one line per epoch on `out`
  std::ostream* out = nullptr;   // where they go: std::cout when null
};

// One epoch of Model::fit.
struct EpochStats {
  int64_t epoch = 0;             // from 1
  double loss = 0;               // mean training loss
  double accuracy = 0;           // training accuracy, in [0, 1]
  double val_accuracy = -1;      // on the validation data; -1 without it
  double seconds = 0;
  double samples_per_second = 0;
};

struct FitHistory {
  std::vector<EpochStats> epochs;
  int64_t steps = 0;
  double seconds = 0;            // training time (compilation and evaluation excluded)
};

// Thrown by Model::fit when SIGINT or SIGTERM arrives: after the step in flight, with the
// checkpoint written when one was asked for.
class Interrupted : public Error {
 public:
  using Error::Error;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // a dynamic dim holds its bound
  // Per dim, the name of the dynamic dim it is ("batch"): any size from 1 to shape[d] may be
  // given, and outputs follow. Empty when every dim is static.
  std::vector<std::string> dynamic_dims;
};

class Model {
 public:
  // A package (`kiln compile`), told by its contents, or a model file (.json or textual IR),
  // compiled here with `options`.
  static Model load(const std::string& path, const Options& options = {});
  // A package held in memory (an executable that embeds one); `name` names it in errors.
  static Model load_package(std::string_view bytes, const std::string& name, const Options& options = {});

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::string& name() const;                // the graph's name
  const std::vector<TensorInfo>& inputs() const;   // of the inference program, in order
  const std::vector<TensorInfo>& outputs() const;
  std::string backend() const;                    // "host" or "cuda"

  // Binds input `name` for the next run (kiln::Error for an unknown name or a wrong type).
  void set_input(const std::string& name, Tensor value);
  // Runs the inference program on the bound inputs (all must be bound).
  void run();
  // Output `name` of the last run.
  const Tensor& output(const std::string& name) const;
  // Binds `inputs`, runs, returns every output by name.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);
  // The same on tensors the caller owns: every input, by name, copied from its memory straight
  // into the program's buffers (the host backend) or the upload staging (the GPU), with no
  // copy on the way in besides. A program with dynamic dims, or a model with a training step,
  // copies them first.
  std::map<std::string, Tensor> run_views(const std::map<std::string, TensorRef>& inputs);

  // The file it was loaded from ("" for load_package).
  const std::string& path() const;
  // The parameters as they are now (after train_step or fit), by name; and replacing some of
  // them (kiln::Error for an unknown name or another type; nothing changes then).
  std::map<std::string, Tensor> parameters() const;
  void set_parameters(const std::map<std::string, Tensor>& values);
  // What `kiln inspect --format=json` reports of the inference program: kernels, fused nodes,
  // FLOPs, bytes, the memory plan (docs/inspect.md has the schema).
  std::string report_json() const;
  // Writes the model as a package, with the parameters as they are now (atomically: a failure
  // leaves no partial file).
  void save(const std::string& path) const;

  // Training: packages compiled with `kiln compile --train`, or Options::train_batch_size.
  bool can_train() const;
  int64_t train_batch_size() const;  // 0 without a training step
  // One optimizer step on a batch (the model's input) and its labels (i32 [batch]); returns
  // the loss. Later runs use the updated parameters.
  float train_step(const Tensor& batch, const Tensor& labels);
  // Trains on samples `x` (the model's input, [N, ...]) and labels `y` (integer, [N]) as
  // `kiln train` does: shuffled batches, the optimizer, evaluation after every epoch. A model
  // file is compiled for training at options.batch_size (a training package trains with what
  // it was compiled with). The trained parameters become this model's. Throws kiln::Error, or
  // kiln::Interrupted on SIGINT/SIGTERM.
  FitHistory fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});

 private:
  struct Impl;
  friend class api::ModelFactory;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A built-in dataset's split ("mnist" or "fashion-mnist"; "train" or "test"), as kiln train
// reads it: images f32 [N,1,28,28] in [0,1] and labels i32 [N]; `first` > 0 keeps the first
// `first` samples.
std::pair<Tensor, Tensor> load_dataset(const std::string& name, const std::string& split,
                                       int64_t first = 0);

// The kernel and package cache (`kiln cache info`): where it is, what it holds, its limit.
struct CacheStats {
  std::string directory;
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t max_bytes = 0;  // $KILN_CACHE_MAX_SIZE, else 10 GiB; 0: no limit
};
CacheStats cache_info();

}  // namespace kiln
