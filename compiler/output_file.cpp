#include "compiler/output_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ir/diagnostic.h"

namespace kiln::compiler {

void write_file_atomically(const std::string& path, std::string_view contents) {
  namespace fs = std::filesystem;
  // The temporary lives in the same directory so that rename() is atomic (same file system).
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path, "cannot write: " + std::string(std::strerror(errno)));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      throw Error(path, "write failed: " + std::string(std::strerror(errno)));
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw Error(path, "cannot write: " + ec.message());
  }
}

}  // namespace kiln::compiler
