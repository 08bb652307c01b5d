#include "compiler/output_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ir/diagnostic.h"

namespace kiln::compiler {

namespace fs = std::filesystem;

namespace {

// The temporary lives in the same directory so that rename() is atomic (same file system).
std::string temporary_for(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

void rename_into_place(const std::string& temp, const std::string& path) {
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw Error(path, "cannot write: " + ec.message());
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view contents) {
  const std::string temp = temporary_for(path);
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
  rename_into_place(temp, path);
}

void copy_file_atomically(const std::string& from, const std::string& path) {
  const std::string temp = temporary_for(path);
  std::error_code ec;
  // In the kernel (sendfile or copy_file_range): no pass through user space.
  fs::copy_file(from, temp, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw Error(path, "cannot write (copying " + from + "): " + ec.message());
  }
  rename_into_place(temp, path);
}

}  // namespace kiln::compiler
