// IDX reading (format in idx.h). The header is validated field by field before any element is
// touched, and the payload size is compared with the product of the dims without overflow, so
// a corrupt header can never make kiln allocate or read out of bounds.
#include "runtime/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "ir/diagnostic.h"
#include "ir/shape.h"

namespace kiln::data {
namespace {

constexpr size_t kPrefixSize = 4;  // 0x00 0x00 type rank
constexpr size_t kDimSize = 4;     // each dimension: big-endian u32

size_t type_size(IdxType type) {
  switch (type) {
    case IdxType::U8:
    case IdxType::I8: return 1;
    case IdxType::I16: return 2;
    case IdxType::I32:
    case IdxType::F32: return 4;
    case IdxType::F64: return 8;
  }
  return 0;
}

bool is_known_type(uint8_t code) {
  switch (code) {
    case 0x08: case 0x09: case 0x0B: case 0x0C: case 0x0D: case 0x0E: return true;
    default: return false;
  }
}

uint32_t read_be32(const std::byte* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex(uint32_t value, int digits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%0*X", digits, value);
  return text;
}

// IDX stores big-endian elements; flip each element in place on a little-endian host.
void to_host_order(std::vector<std::byte>& data, size_t element_size) {
  if (std::endian::native == std::endian::big || element_size == 1) return;
  for (size_t i = 0; i + element_size <= data.size(); i += element_size) {
    for (size_t a = i, b = i + element_size - 1; a < b; ++a, --b) std::swap(data[a], data[b]);
  }
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, std::string("cannot open file (") + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) throw Error(path, "cannot determine the file size");
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (!in) throw Error(path, "cannot read file");
  return bytes;
}

bool is_gzip(std::span<const std::byte> bytes) {
  return bytes.size() >= 2 && bytes[0] == std::byte{0x1f} && bytes[1] == std::byte{0x8b};
}

// Inflates every gzip member in `compressed` (gzip allows several back to back; `cat a.gz b.gz`
// is a valid file whose content is a followed by b).
std::vector<std::byte> gunzip(std::span<const std::byte> compressed, const std::string& path) {
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip header and trailer rather than a raw zlib stream.
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    throw Error(path, "cannot initialise zlib");
  }
  std::vector<std::byte> out;
  // The gzip trailer's last 4 bytes hold the uncompressed size mod 2^32: a good first guess,
  // capped by deflate's best ratio (about 1032:1) so a corrupt trailer cannot reserve gigabytes.
  if (compressed.size() >= 4) {
    const auto* t = compressed.data() + compressed.size() - 4;
    const size_t claimed = std::to_integer<size_t>(t[0]) | (std::to_integer<size_t>(t[1]) << 8) |
                           (std::to_integer<size_t>(t[2]) << 16) |
                           (std::to_integer<size_t>(t[3]) << 24);
    out.reserve(std::min(claimed, compressed.size() * 1032));
  }
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::byte chunk[1 << 16];
  int status = Z_OK;
  while (true) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk);
    stream.avail_out = sizeof chunk;
    status = inflate(&stream, Z_NO_FLUSH);
    out.insert(out.end(), chunk, chunk + (sizeof chunk - stream.avail_out));
    if (status == Z_STREAM_END) {
      if (stream.avail_in == 0) break;
      inflateReset(&stream);  // another member follows
      continue;
    }
    if (status == Z_OK) continue;
    // Z_BUF_ERROR with no input left: the stream stopped before its end (a truncated file).
    const size_t offset = compressed.size() - stream.avail_in;
    const std::string message =
        status == Z_BUF_ERROR && stream.avail_in == 0
            ? "gzip data is truncated (the compressed stream ends at byte " +
                  std::to_string(offset) + " before its end marker)"
            : "corrupt gzip data near compressed byte " + std::to_string(offset) + " (" +
                  (stream.msg ? stream.msg : "zlib error " + std::to_string(status)) + ")";
    inflateEnd(&stream);
    throw Error(path, message);
  }
  inflateEnd(&stream);
  return out;
}

}  // namespace

const char* idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::U8: return "u8";
    case IdxType::I8: return "i8";
    case IdxType::I16: return "i16";
    case IdxType::I32: return "i32";
    case IdxType::F32: return "f32";
    case IdxType::F64: return "f64";
  }
  return "?";
}

int64_t IdxArray::num_elements() const { return ir::num_elements(dims); }

double IdxArray::get(int64_t index) const {
  const std::byte* p = data.data() + static_cast<size_t>(index) * type_size(type);
  switch (type) {
    case IdxType::U8: return double(std::to_integer<uint8_t>(*p));
    case IdxType::I8: return double(static_cast<int8_t>(std::to_integer<uint8_t>(*p)));
    case IdxType::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case IdxType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case IdxType::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case IdxType::F64: { double v; std::memcpy(&v, p, 8); return v; }
  }
  return 0;
}

IdxArray parse_idx(std::span<const std::byte> bytes, const std::string& name) {
  if (bytes.size() < kPrefixSize) {
    throw Error(name, "truncated IDX file: " + std::to_string(bytes.size()) +
                          " bytes, shorter than the 4-byte magic number");
  }
  const uint32_t magic = read_be32(bytes.data());
  if (bytes[0] != std::byte{0} || bytes[1] != std::byte{0}) {
    throw Error(name, "not an IDX file: magic number " + hex(magic, 8) +
                          " does not start with two zero bytes (byte offset 0)");
  }
  const uint8_t code = std::to_integer<uint8_t>(bytes[2]);
  if (!is_known_type(code)) {
    throw Error(name, "bad IDX magic " + hex(magic, 8) + ": unknown element type code " +
                          hex(code, 2) + " at byte offset 2 (expected 0x08 u8, 0x09 i8, "
                          "0x0B i16, 0x0C i32, 0x0D f32 or 0x0E f64)");
  }
  IdxArray array;
  array.type = static_cast<IdxType>(code);
  const int rank = std::to_integer<int>(bytes[3]);
  if (rank == 0) {
    throw Error(name, "IDX magic " + hex(magic, 8) + " has rank 0 (byte offset 3); an IDX "
                      "file holds at least one dimension, the number of items");
  }
  const size_t header_size = kPrefixSize + kDimSize * size_t(rank);
  if (bytes.size() < header_size) {
    throw Error(name, "truncated IDX header: rank " + std::to_string(rank) + " needs " +
                          std::to_string(header_size) + " header bytes, the file has " +
                          std::to_string(bytes.size()));
  }
  // Every dim and the element count stay <= 2^31 - 1, so the products below cannot overflow.
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const size_t offset = kPrefixSize + kDimSize * size_t(d);
    const int64_t dim = read_be32(bytes.data() + offset);
    if (dim > kMaxIdxItems) {
      throw Error(name, "dimension " + std::to_string(d) + " (byte offset " +
                            std::to_string(offset) + ") is " + std::to_string(dim) +
                            "; kiln reads at most 2^31-1 items per dimension");
    }
    count *= dim;
    if (count > kMaxIdxItems) {
      throw Error(name, "the dims in the header hold more than 2^31-1 elements; kiln reads at "
                        "most that many from one IDX file");
    }
    array.dims.push_back(dim);
  }
  const size_t element_size = type_size(array.type);
  const size_t expected = size_t(count) * element_size;
  const size_t payload = bytes.size() - header_size;
  if (payload != expected) {
    std::string dims_text;
    for (int64_t dim : array.dims) dims_text += (dims_text.empty() ? "" : "x") + std::to_string(dim);
    throw Error(name, std::string(payload < expected ? "truncated IDX file" : "trailing bytes in IDX file") +
                          ": dims " + dims_text + " of " + idx_type_name(array.type) + " need " +
                          std::to_string(expected) + " data bytes after the " +
                          std::to_string(header_size) + "-byte header, the file has " +
                          std::to_string(payload) + " (data ends at byte offset " +
                          std::to_string(bytes.size()) + ")");
  }
  array.data.assign(bytes.begin() + std::ptrdiff_t(header_size), bytes.end());
  to_host_order(array.data, element_size);
  return array;
}

std::vector<std::byte> read_maybe_gzipped(const std::string& path) {
  std::vector<std::byte> bytes = read_file(path);
  if (is_gzip(bytes)) return gunzip(bytes, path);
  return bytes;
}

IdxArray read_idx(const std::string& path) {
  return parse_idx(read_maybe_gzipped(path), path);
}

namespace {
IdxArray read_expecting(const std::string& path, int rank, const char* what, const char* shape) {
  IdxArray array = read_idx(path);
  const uint32_t found = (uint32_t(array.type) << 8) | uint32_t(array.dims.size());
  const uint32_t wanted = (uint32_t(IdxType::U8) << 8) | uint32_t(rank);
  if (found != wanted) {
    throw Error(path, std::string("expected ") + what + ": IDX magic " + hex(wanted, 8) +
                          " (u8, rank " + std::to_string(rank) + ", " + shape + "), found " +
                          hex(found, 8) + " (" + idx_type_name(array.type) + ", rank " +
                          std::to_string(array.dims.size()) + ")");
  }
  return array;
}
}  // namespace

IdxArray read_idx_images(const std::string& path) {
  return read_expecting(path, 3, "images", "[N,rows,cols]");
}

IdxArray read_idx_labels(const std::string& path) {
  return read_expecting(path, 1, "labels", "[N]");
}

}  // namespace kiln::data
