// Model::load: a package read from a file, or a model file compiled here into a package first
// (the same build as `kiln compile`, through the package cache).
#include "codegen/library_dispatch.h"
#include "compiler/api/api_internal.h"
#include "compiler/package_builder.h"
#include "compiler/trainer.h"
#include "passes/pass_manager.h"
#include "ir/diagnostic.h"

namespace kiln {

Model Model::load(const std::string& path, const Options& options) {
  // A package file is mapped, not read (runtime::read_package: a pipe is read to its end).
  if (runtime::is_package_file(path))
    return api::ModelFactory::from_package(runtime::read_package(path), path, options);
  compiler::PackageRequest request;
  request.model = path;
  request.archs = options.archs;
  request.opt_level = options.opt_level;
  // The default --library (auto): split-k leaves the GEMMs cuDNN and cuBLASLt compute whole.
  const codegen::LibrarySelection libraries = codegen::parse_library_flag(request.library);
  request.pipeline = passes::keep_vendor_gemms_whole(passes::inference_pipeline(options.opt_level),
                                                     libraries.cudnn, libraries.cublaslt);
  request.run_pipeline = compiler::pipeline_runner(request.pipeline);
  if (options.train_batch_size > 0)
    request.train = compiler::PackageRequest::Training{options.train_batch_size, options.optimizer, 0};
  std::unique_ptr<runtime::KernelCache> cache;
  if (options.use_cache) cache = std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
  request.cache = cache.get();
  return api::ModelFactory::from_package(compiler::build_package(request).package, path, options);
}

}  // namespace kiln
