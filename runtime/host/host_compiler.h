// Running the host C++ compiler (internal to runtime/host/).
#pragma once

#include <string>
#include <vector>

namespace kiln::runtime::host::detail {

// The compiler and what identifies it in cache keys.
struct HostCompiler {
  std::string program;  // "g++"
  std::string version;  // "12.2.0" (g++ -dumpfullversion)
  std::string target;   // "x86_64"
  std::vector<std::string> flags;
  std::string describe() const { return program + " " + version; }
};

// The compiler, probed once per process. Throws kiln::Error when it cannot be run.
const HostCompiler& host_compiler();

// A directory under $TMPDIR that removes itself unless kept (KILN_HOST_KEEP_TEMPS=1).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  const std::string& path() const { return path_; }
  static bool keep_requested();

 private:
  std::string path_;
};

// Compiles `source` (written to dir/stem.cu, with the prelude next to it) into dir/stem.so via
// a temporary file and a rename, so the .so is complete whenever it exists. Throws kiln::Error
// holding the compiler's output on failure. Returns the .so path.
std::string compile_shared_object(const std::string& source, const std::string& stem,
                                  const std::string& dir, const std::string& location);

void write_file(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);

}  // namespace kiln::runtime::host::detail
