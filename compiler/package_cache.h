// The package cache: a package built from a model is kept in the kernel cache's directory
// (runtime/compile/kernel_cache.h) under a key that covers everything the build reads, so that
// building it again (`kiln compile`, `kiln run`, Model::load) is a lookup.
//
// The key hashes:
//   - kiln's build identity (runtime::build_identity) and version, NVRTC's version and the
//     package format version: another build of kiln never sees this one's packages;
//   - the request: archs, PTX, --library, --precision, -O and the pass pipeline;
//   - the model file's name and bytes (the manifest records both);
//   - the model as loaded, printed as IR: what the importer made of the file and of any file it
//     read besides, whatever the format;
//   - the bytes of every parameter read from a file (loaded for the hash; the build keeps them).
// A parameter with an initializer (he_normal, seed 1) is hashed by that spec, in the printed
// IR: its data is a function of it, and is generated only on a miss. A build whose passes are
// watched or limited (IR dumps, pass logs, --pass-fuel) or a training package is not cached.
#pragma once

#include <optional>
#include <string_view>

#include "compiler/package_builder.h"
#include "runtime/compile/kernel_cache.h"

namespace kiln::compiler {

// The key of the package that `request` builds from `graph`, the model as load_model returns it
// (this loads its file parameters); `model_hash` is the manifest's hash of the model file's
// bytes. nullopt when this build of kiln has no build identity.
std::optional<runtime::CacheKey> package_cache_key(const PackageRequest& request,
                                                   std::string_view model_hash, ir::Graph& graph);

}  // namespace kiln::compiler
