// Pieces shared by the .npy and safetensors readers and writers (internal to compiler/).
#pragma once

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/tensor.h"

namespace kiln::compiler {

// Both file formats store little-endian data, which kiln copies straight into tensors.
static_assert(std::endian::native == std::endian::little, "kiln assumes a little-endian host");

// The text of errno, for "cannot open file (No such file or directory)".
inline std::string errno_text(int error) { return std::strerror(error); }

// Writes `pieces`, in order, to a temporary file in the directory of `path` and renames it into
// place: rename within one file system is atomic, so a failure (disk full, a crash) never leaves
// a half-written file under `path`. Throws kiln::Error located at `path`.
inline void write_file_atomically(const std::string& path,
                                  const std::vector<std::string_view>& pieces) {
  namespace fs = std::filesystem;
  static std::atomic<unsigned> counter{0};  // two threads writing the same path get two temps
  const fs::path target(path);
  fs::path temp = target;
  temp.replace_filename("." + target.filename().string() + ".tmp-" +
                        std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path, "cannot create file (" + errno_text(errno) + ")");
  for (std::string_view piece : pieces) out.write(piece.data(), std::streamsize(piece.size()));
  out.close();
  std::error_code ignored;
  if (out.fail()) {
    const int error = errno;
    fs::remove(temp, ignored);
    throw Error(path, "cannot write file (" + errno_text(error) + ")");
  }
  std::error_code rename_error;
  fs::rename(temp, target, rename_error);
  if (rename_error) {
    fs::remove(temp, ignored);
    throw Error(path, "cannot replace file (" + rename_error.message() + ")");
  }
}

// The raw bytes of a tensor as one piece for write_file_atomically.
inline std::string_view tensor_bytes_view(const ir::Tensor& tensor) {
  return {reinterpret_cast<const char*>(tensor.data()), tensor.byte_size()};
}

// Element `i`'s f64 `value` stored into `tensor`, a narrower float type: a finite value beyond
// its range would silently become infinity, so it is an error located at `path` (`what` names
// the tensor, "tensor 'w': ", or is empty) naming the element.
inline void set_narrowed(ir::Tensor& tensor, int64_t i, double value, const std::string& path,
                         const std::string& what) {
  if (!ir::fits_dtype(value, tensor.dtype())) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", value);
    throw Error(path, what + "f64 element " + std::to_string(i) + " (" + text +
                          ") is beyond the range of " + std::string(ir::dtype_name(tensor.dtype())) +
                          ", the type it is read as");
  }
  tensor.set(i, value);
}

// `given` as the input `slot` takes it: f64 data (NumPy's default float) given for an f32, f16
// or bf16 input is rounded to it, range-checked as above; anything else is returned unchanged
// for the caller's own type check. The shape is the given one (of the slot's rank): a dynamic
// dim (ir/dynamic_dims.h) may be smaller than the slot's bound.
inline ir::Tensor conform_input(ir::Tensor given, const ir::TensorType& slot,
                                const std::string& where, const std::string& what = "") {
  if (given.dtype() != ir::DType::F64 || !ir::is_floating(slot.dtype) ||
      slot.dtype == ir::DType::F64 || given.type().rank() != slot.rank())
    return given;
  ir::Tensor narrowed(ir::TensorType{slot.dtype, given.shape()});
  for (int64_t i = 0; i < narrowed.num_elements(); ++i)
    set_narrowed(narrowed, i, given.get(i), where, what);
  return narrowed;
}

// Builds a tensor from stored little-endian bytes of its own type. Bools normalize to 0/1
// because Tensor treats any nonzero byte as true but kernels may compare bytes.
inline ir::Tensor tensor_from_stored_bytes(const ir::TensorType& type, std::vector<std::byte> bytes) {
  if (type.dtype == ir::DType::Bool)
    for (std::byte& b : bytes) b = b != std::byte{0} ? std::byte{1} : std::byte{0};
  return ir::Tensor(type, std::move(bytes));
}

}  // namespace kiln::compiler
