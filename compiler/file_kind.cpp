#include "compiler/file_kind.h"

#include <filesystem>

#include "ir/diagnostic.h"

namespace kiln::compiler {

void check_readable_file(const std::string& path, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  const std::string expected = ", not " + std::string(what);
  switch (status.type()) {
    case fs::file_type::directory: throw Error(path, "is a directory" + expected);
    case fs::file_type::character: throw Error(path, "is a character device" + expected);
    case fs::file_type::block: throw Error(path, "is a block device" + expected);
    case fs::file_type::socket: throw Error(path, "is a socket" + expected);
    default: break;
  }
  // A missing or unreadable file is left to the caller's open, which says why with errno.
}

namespace {

bool starts_with(std::string_view head, std::string_view magic) { return head.starts_with(magic); }

// ONNX's ModelProto starts with ir_version (field 1, a small varint: 08 nn) followed by another
// field of the model: producer_name 12, producer_version 1a, domain 22, model_version 28,
// doc_string 32, graph 3a, opset_import 42.
bool looks_like_onnx(std::string_view head) {
  if (head.size() < 3 || head[0] != 0x08 || static_cast<unsigned char>(head[1]) > 0x20) return false;
  const unsigned char next = static_cast<unsigned char>(head[2]);
  return next == 0x12 || next == 0x1a || next == 0x22 || next == 0x28 || next == 0x32 ||
         next == 0x3a || next == 0x42;
}

// safetensors: an 8-byte little-endian header length, then the JSON header.
bool looks_like_safetensors(std::string_view head) {
  return head.size() > 9 && head[8] == '{' && head[7] == 0 && head[6] == 0 && head[5] == 0;
}

bool is_binary(std::string_view head) {
  for (const char c : head.substr(0, 4096)) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte == 0 || (byte < 0x20 && byte != '\n' && byte != '\r' && byte != '\t' && byte != '\f'))
      return true;
  }
  return false;
}

}  // namespace

std::optional<ForeignFile> detect_foreign_format(std::string_view head, std::string_view path) {
  using F = ForeignFormat;
  if (starts_with(head, "\x89HDF\r\n\x1a\n")) return ForeignFile{F::Hdf5, "an HDF5 file (a Keras .h5 model?)"};
  if (starts_with(head, "\x89KILN\r\n\x1a"))
    return ForeignFile{F::KilnPackage, "a kiln package (kiln run, train and inspect take it)"};
  if (starts_with(head, "\x93NUMPY")) return ForeignFile{F::Npy, "a NumPy .npy array"};
  if (starts_with(head, "PK\x03\x04"))
    return ForeignFile{F::Zip, "a zip archive (a PyTorch .pt or Keras .keras file?)"};
  if (starts_with(head, "\x1f\x8b")) return ForeignFile{F::Gzip, "gzip-compressed data"};
  if (head.size() >= 8 && head.substr(4, 4) == "TFL3") return ForeignFile{F::TfLite, "a TensorFlow Lite model"};
  if (looks_like_safetensors(head)) return ForeignFile{F::Safetensors, "a safetensors weights file"};
  if (path.ends_with(".onnx") || looks_like_onnx(head))
    return ForeignFile{F::Onnx, "an ONNX model (protobuf)"};
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5)
    return ForeignFile{F::Pickle, "a Python pickle (a PyTorch checkpoint?)"};
  if (is_binary(head)) return ForeignFile{F::Binary, "a binary file"};
  return std::nullopt;
}

}  // namespace kiln::compiler
