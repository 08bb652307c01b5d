// Shared by the libFuzzer harnesses (tests/fuzz/README.md). A harness accepts kiln::Error, the
// user error every parser must turn bad input into; anything else escapes and libFuzzer reports
// it: a crash, a sanitizer report, an InternalError (KILN_CHECK), a stray std::exception
// (nlohmann's type_error, std::bad_alloc), a timeout or an out-of-memory.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace kiln::fuzz {

// A private directory for this process, removed at exit: the harnesses for file formats drive
// the real readers, which take paths.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path path = std::filesystem::path(tmp ? tmp : "/tmp") /
                                 ("kiln-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return path;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace kiln::fuzz
