// A regular file mapped read-only into memory: large files (packages, cached packages) are
// checked and parsed in place instead of being copied into a string first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::runtime {

class MappedFile {
 public:
  // Maps the regular file at `path`. Throws kiln::Error naming the path ("cannot open: ...",
  // "cannot map: ...") when it cannot. An empty file maps to an empty view.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln::runtime
