#include "compiler/package_cache.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/library_dispatch.h"
#include "compiler/parameters.h"
#include "ir/printer.h"
#include "runtime/compile/build_identity.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::compiler {

std::optional<runtime::CacheKey> package_cache_key(const PackageRequest& request,
                                                   std::string_view model_hash, ir::Graph& graph) {
  const std::string& identity = runtime::build_identity();
  if (identity.empty()) return std::nullopt;
  load_file_parameter_data(graph);

  // What the package is made from: each part length-prefixed, so that no two models run
  // together into one text.
  std::string content;
  auto add = [&content](std::string_view label, std::string_view part) {
    content += fmt::format("{} {}\n", label, part.size());
    content += part;
    content += '\n';
  };
  add("model-name", std::filesystem::path(request.model).filename().string());
  add("model-bytes", model_hash);
  add("graph", ir::print_graph(graph));
  for (const ir::Value* param : graph.parameters) {
    if (!param->data) continue;
    const auto& bytes = param->data->bytes();
    add("parameter " + param->name,
        runtime::hash_bytes(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
  }

  runtime::CacheKey key;
  key.kind = "package";
  key.source_hash = runtime::hash_bytes(content);
  const bool device_code = !request.archs.empty();
  key.compiler = fmt::format("kiln {} build {}{}", KILN_VERSION, identity,
                             device_code ? ", " + runtime::nvrtc_version() : "");
  key.target = fmt::format("{}", fmt::join(request.archs, ","));
  key.flags = fmt::format("ptx={} library={} precision={} weights={} O{} passes={}", request.ptx,
                          request.library, codegen::precision_name(request.precision),
                          ir::dtype_name(request.weights_dtype), request.opt_level,
                          fmt::join(request.pipeline, ","));
  key.prelude_version = fmt::format("package format {}", runtime::kPackageFormatVersion);
  return key;
}

}  // namespace kiln::compiler
