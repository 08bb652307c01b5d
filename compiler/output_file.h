// Writing files so that a failure never leaves a half-written one behind.
#pragma once

#include <string>
#include <string_view>

namespace kiln::compiler {

// Writes `contents` to a temporary file next to `path`, then renames it into place.
// Throws kiln::Error naming the path on failure; the temporary file is removed.
void write_file_atomically(const std::string& path, std::string_view contents);

// The same for a copy of the file `from`.
void copy_file_atomically(const std::string& from, const std::string& path);

}  // namespace kiln::compiler
