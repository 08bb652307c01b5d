// Model::load: a package read from a file, or a model file compiled here into a package first
// (the same build as `kiln compile`, through the package cache). And what else needs the
// compiler: the report (report_json), training from arrays (fit) and the built-in datasets.
#include <fmt/format.h>

#include <iostream>

#include "codegen/library_dispatch.h"
#include "compiler/api/api_internal.h"
#include "compiler/inspect_report.h"
#include "compiler/interrupt.h"
#include "compiler/model_loader.h"
#include "compiler/package_builder.h"
#include "compiler/trainer.h"
#include "ir/diagnostic.h"
#include "passes/pass_manager.h"
#include "runtime/data/dataset.h"

namespace kiln {

namespace {

// The import options that Options carries, checked as the CLI checks --input-shape and --dim.
compiler::ImportOptions import_options(const std::string& path, const Options& options) {
  compiler::ImportOptions import;
  for (const auto& [name, shape] : options.input_shapes) {
    for (int64_t dim : shape)
      if (dim < 1)
        throw Error("input_shapes['" + name + "']",
                    fmt::format("dimension {} is not a positive integer", dim));
    import.input_shapes[name] = shape;
  }
  for (const auto& [name, bound] : options.dynamic_dims) {
    if (bound < 1)
      throw Error("dynamic_dims['" + name + "']", fmt::format("the bound {} is not a positive integer", bound));
    import.dim_bounds[name] = bound;
  }
  const bool imported = compiler::is_imported_model(path);
  if (!options.input_shapes.empty() && !imported)
    throw Error("input_shapes", path + " is not an ONNX or Keras model; its input shapes are fixed");
  if (!options.dynamic_dims.empty() && !imported)
    throw Error("dynamic_dims", path + " is not an ONNX or Keras model; a kiln JSON model declares "
                                       "its dynamic dims in \"dims\"");
  return import;
}

codegen::Precision precision_of(const Options& options) {
  const std::optional<codegen::Precision> precision = codegen::parse_precision(options.precision);
  if (!precision)
    throw Error("precision", "'" + options.precision + "' is not one of " + std::string(codegen::kPrecisionNames));
  return *precision;
}

// Compiles the model file at `path` into a package and loads it; `values` replace the data of
// the parameters they name (fit's trained weights).
Model load_model_file(const std::string& path, const Options& options,
                      std::map<std::string, ir::Tensor> values = {}) {
  compiler::PackageRequest request;
  request.parameter_values = std::move(values);
  request.model = path;
  request.import = import_options(path, options);
  request.archs = options.archs;
  request.opt_level = options.opt_level;
  request.precision = precision_of(options);
  // The default --library (auto): split-k leaves the GEMMs cuDNN and cuBLASLt compute whole.
  const codegen::LibrarySelection libraries = codegen::parse_library_flag(request.library);
  request.pipeline = passes::keep_vendor_gemms_whole(
      passes::with_nhwc_convolutions(passes::inference_pipeline(options.opt_level),
                                     codegen::cudnn_reads_nhwc(libraries, request.precision)),
      libraries.cudnn, libraries.cublaslt);
  request.run_pipeline = compiler::pipeline_runner(request.pipeline);
  if (options.train_batch_size > 0)
    request.train = compiler::PackageRequest::Training{options.train_batch_size, options.optimizer, 0};
  std::unique_ptr<runtime::KernelCache> cache;
  if (options.use_cache) cache = std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
  request.cache = cache.get();
  return api::ModelFactory::from_package(compiler::build_package(request).package, path, options);
}

}  // namespace

Model Model::load(const std::string& path, const Options& options) {
  // A package file is mapped, not read (runtime::read_package: a pipe is read to its end).
  if (runtime::is_package_file(path))
    return api::ModelFactory::from_package(runtime::read_package(path), path, options);
  return load_model_file(path, options);
}

std::string Model::report_json() const {
  const runtime::Package& package = api::ModelFactory::package(*this);
  const runtime::PackageProgram* program = package.find(runtime::kInferenceProgram);
  return compiler::format_inspection_json(compiler::package_inspection(package, *program));
}

FitHistory Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  if (path().empty())
    throw Error(name(), "fit needs the model's file: this model was loaded from memory");
  const bool package = runtime::is_package_file(path());
  if (package && !can_train())
    throw Error(path(), "the package has no training step: fit the model file, or compile it "
                        "with `kiln compile --train`");
  if (options.validation_x.shape().empty() != options.validation_y.shape().empty())
    throw Error("validation_data", "needs both the samples and their labels");
  compiler::TrainOptions train;
  train.model = path();
  train.data = "arrays";
  train.train_data = data::dataset_from_tensors(api::to_ir(x), "x", api::to_ir(y), "y");
  if (!options.validation_x.shape().empty())
    train.test_data = data::dataset_from_tensors(api::to_ir(options.validation_x), "validation x",
                                                 api::to_ir(options.validation_y), "validation y");
  else
    train.test_data = data::Dataset{};  // none: no evaluation
  train.epochs = options.epochs;
  train.batch_size = options.batch_size;
  train.optimizer = options.optimizer;
  train.lr = options.lr;
  train.momentum = options.momentum;
  train.weight_decay = options.weight_decay;
  train.seed = options.seed;
  train.checkpoint = options.checkpoint;
  train.resume = options.resume;
  train.quiet = !options.progress;
  train.progress = options.progress;
  train.precision = precision_of(api::ModelFactory::options(*this));
  std::unique_ptr<runtime::KernelCache> cache;
  if (api::ModelFactory::options(*this).use_cache)
    cache = std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
  train.cache = cache.get();
  const Backend backend = api::ModelFactory::options(*this).backend;
  train.backend = backend == Backend::Host ? "host" : backend == Backend::Cuda ? "cuda" : "auto";
  if (package) {
    // A training package decided these when it was compiled.
    const FitOptions defaults;
    if (options.batch_size != defaults.batch_size) train.compile_time_flags.push_back("batch_size");
    if (options.optimizer != defaults.optimizer) train.compile_time_flags.push_back("optimizer");
    if (options.lr != defaults.lr) train.compile_time_flags.push_back("lr");
  }
  FitHistory history;
  train.on_epoch = [&](const compiler::EpochReport& report) {
    history.epochs.push_back({report.epoch, report.loss, report.accuracy, report.test_accuracy,
                              report.seconds, report.throughput});
  };
  std::map<std::string, ir::Tensor> state;
  train.final_state = &state;
  compiler::TrainSummary summary;
  try {
    summary = compiler::train(train, options.out ? *options.out : std::cout);
  } catch (const compiler::Interrupted&) {
    throw Interrupted(path(), "interrupted");
  }
  history.steps = summary.steps;
  history.seconds = summary.seconds;
  // The trained parameters become this model's. A model with a training step shares them by
  // name. A model file's inference program was optimized from the initial weights (a batch
  // norm folded into a conv's weights), so it is compiled again from the trained ones: the
  // kernels come from the cache, only the passes run.
  if (can_train()) {
    std::map<std::string, Tensor> trained;
    const std::map<std::string, Tensor> current = parameters();
    for (auto& [name, value] : state)
      if (current.count(name)) trained[name] = api::from_ir(value);
    set_parameters(trained);
  } else {
    const ir::Graph source = compiler::load_model(path(), import_options(path(), api::ModelFactory::options(*this)));
    std::map<std::string, ir::Tensor> trained;
    for (const ir::Value* param : source.parameters) {
      auto it = state.find(param->name);
      if (it != state.end()) trained.emplace(param->name, std::move(it->second));
    }
    *this = load_model_file(path(), api::ModelFactory::options(*this), std::move(trained));
  }
  return history;
}

std::pair<Tensor, Tensor> load_dataset(const std::string& name, const std::string& split,
                                       int64_t first) {
  if (!data::is_builtin_dataset(name))
    throw Error("dataset '" + name + "'", "not one of mnist, fashion-mnist");
  if (split != "train" && split != "test")
    throw Error("split '" + split + "'", "not one of train, test");
  if (first < 0) throw Error("first", fmt::format("must be >= 0, got {}", first));
  const data::Dataset set =
      data::load_builtin_dataset(name, split == "train" ? data::Split::Train : data::Split::Test, first);
  return {api::from_ir(set.images), api::from_ir(set.labels)};
}

CacheStats cache_info() {
  const runtime::KernelCache cache(runtime::KernelCache::default_directory());
  const runtime::CacheInfo info = cache.info();
  return {info.directory, info.entries, info.bytes, runtime::KernelCache::max_bytes_from_environment()};
}

}  // namespace kiln
