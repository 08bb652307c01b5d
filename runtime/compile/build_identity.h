// What tells one build of kiln from another: the key of a cache entry that depends on kiln's own
// code (a package built from a model) and not only on inputs that the key hashes.
#pragma once

#include <string>

namespace kiln::runtime {

// The GNU build ID (hex) of the binary that holds this code: the kiln executable, a program
// linked with libkiln.a, or a shared library. The linker computes it from the binary's
// contents, so any change to kiln's code changes it and identical builds share it. Empty
// when the binary has none (linked with --build-id=none): callers then cache nothing.
const std::string& build_identity();

}  // namespace kiln::runtime
