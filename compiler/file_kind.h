// What a file is, for messages: a path that is not a regular file, and a binary format given
// where a model (JSON or textual IR) was expected.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::compiler {

// Throws a kiln::Error located at `path` when it names something that is not a file: a
// directory, a character or block device (reading /dev/zero would never end) or a socket. A
// FIFO is allowed (`kiln opt <(generate-model)` passes one); a missing or unreadable file is
// left to the caller's open, whose message gives errno's reason. `what` names what the file
// should have been ("a model file", "a .npy file").
void check_readable_file(const std::string& path, std::string_view what);

// Formats kiln is given by mistake (or, for ONNX and Keras, that an importer reads), recognized
// from the first bytes. One function, so that an importer can take its format from here.
enum class ForeignFormat { Onnx, Hdf5, KilnPackage, Npy, Safetensors, Zip, Gzip, Pickle, TfLite, Binary };

struct ForeignFile {
  ForeignFormat format;
  std::string description;  // "an ONNX model (protobuf)"
};

// The format of `head` (a file's first bytes; `path` for its extension) when it is not text that
// kiln parses; nullopt for text (JSON, textual IR or anything else printable).
std::optional<ForeignFile> detect_foreign_format(std::string_view head, std::string_view path);

}  // namespace kiln::compiler
