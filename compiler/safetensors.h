// safetensors files: an 8-byte little-endian header length, a JSON header mapping each tensor
// name to {dtype, shape, data_offsets}, then the raw little-endian data.
// https://github.com/huggingface/safetensors (format description in its README).
//
// Supported dtypes: F32, F16, BF16, F64 (read as f32; a finite value beyond f32's range is an
// error), I32, I64, BOOL. Every inconsistency —
// truncated file, header length past the end, header not JSON, offsets out of range or not
// matching shape × dtype size, overlapping data — is a kiln::Error naming the file (and the
// tensor) and what is wrong.
#pragma once

#include <map>
#include <string>

#include "ir/tensor.h"

namespace kiln::compiler {

struct SafetensorsEntry {
  ir::TensorType type;  // as stored (F64 reported as f32)
  std::string stored_dtype;  // "F32", "F64", ...
  uint64_t begin = 0;   // byte offsets into the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Reads and validates the header (not the data). Throws kiln::Error.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // The header's "__metadata__" (free-form strings; kiln's checkpoints record their training
  // settings there).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads one tensor's data. Throws kiln::Error if the file changed underneath.
  ir::Tensor read(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes the tensors (sorted by name) to `path` via a temporary file renamed into place.
// `metadata`, when not empty, goes into the header's "__metadata__".
void write_safetensors(const std::string& path, const std::map<std::string, ir::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::compiler
