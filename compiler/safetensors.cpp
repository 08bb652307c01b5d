// safetensors reading and writing.
//
// The file is trusted for nothing: the header length, every offset and every shape is checked
// before any data is read, so a corrupt or hostile file yields an error naming the fault rather
// than a huge allocation or a read past the end. The checks follow the reference implementation
// (huggingface/safetensors, `Metadata::validate`), minus its rule that the tensors cover the
// data section without gaps, which does not matter for reading.
#include "compiler/safetensors.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compiler/file_kind.h"
#include "compiler/json_text.h"
#include "compiler/tensor_file_util.h"
#include "ir/diagnostic.h"

namespace kiln::compiler {
namespace {

using json = nlohmann::json;

constexpr uint64_t kLengthSize = 8;                     // the little-endian u64 header length
constexpr uint64_t kMaxHeaderSize = 100'000'000;        // same limit as the reference reader
constexpr uint64_t kSafetensorsHeaderAlignment = 8;  // so the data section starts aligned

struct StoredDType {
  std::string_view name;
  ir::DType dtype;
  uint64_t size;  // bytes per stored element
};

// F64 reads as f64; an f32 (f16, bf16) parameter stored as F64 is rounded where it loads
// (compiler/parameters.cpp).
constexpr StoredDType kStoredDTypes[] = {
    {"F32", ir::DType::F32, 4},   {"F16", ir::DType::F16, 2}, {"BF16", ir::DType::BF16, 2},
    {"I32", ir::DType::I32, 4},   {"I64", ir::DType::I64, 8}, {"BOOL", ir::DType::Bool, 1},
    {"F64", ir::DType::F64, 8},
    {"I8", ir::DType::I8, 1},     {"U8", ir::DType::U8, 1},   {"I16", ir::DType::I16, 2},
    {"U16", ir::DType::U16, 2},   {"U32", ir::DType::U32, 4}, {"U64", ir::DType::U64, 8},
};

const StoredDType* find_stored_dtype(std::string_view name) {
  for (const StoredDType& entry : kStoredDTypes)
    if (entry.name == name) return &entry;
  return nullptr;
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Parses and checks one tensor entry of the header; `data_size` is the data section's length.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& value,
                             uint64_t data_size) {
  const std::string where = "tensor '" + escape_for_message(name) + "': ";
  if (!value.is_object()) throw Error(path, where + "entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) throw Error(path, where + "entry has no '" + key + "'");

  const json& dtype = value["dtype"];
  const StoredDType* stored =
      dtype.is_string() ? find_stored_dtype(dtype.get<std::string>()) : nullptr;
  if (stored == nullptr)
    throw Error(path, where + "unsupported dtype " + describe_json(dtype) +
                          "; kiln reads F32, F16, BF16, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL");

  const json& shape = value["shape"];
  if (!shape.is_array()) throw Error(path, where + "'shape' is not a list");
  ir::Shape dims;
  for (const json& dim : shape) {
    if (!dim.is_number_unsigned())
      throw Error(path, where + "'shape' " + describe_json(shape) + " must hold non-negative integers");
    dims.push_back(static_cast<int64_t>(std::min<uint64_t>(dim.get<uint64_t>(), INT64_MAX)));
  }
  const std::optional<int64_t> count = ir::checked_num_elements(dims);
  if (!count) {
    const bool has_zero = std::find(dims.begin(), dims.end(), 0) != dims.end();
    throw Error(path, where + "shape " + ir::shape_to_string(dims) +
                          (has_zero ? " has a zero-size dimension; kiln tensors need every "
                                      "dimension >= 1"
                                    : " has more than 2^48 elements"));
  }

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw Error(path, where + "'data_offsets' " + describe_json(offsets) +
                          " must be two non-negative integers [begin, end]");
  SafetensorsEntry entry;
  entry.type = ir::TensorType{stored->dtype, dims};
  entry.stored_dtype = std::string(stored->name);
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  const std::string range = "data_offsets " + range_text(entry.begin, entry.end);
  if (entry.begin > entry.end) throw Error(path, where + range + " end before they begin");
  if (entry.end > data_size)
    throw Error(path, where + range + " run past the end of the data section (" +
                          std::to_string(data_size) + " bytes)");
  const uint64_t needed = static_cast<uint64_t>(*count) * stored->size;
  if (entry.end - entry.begin != needed)
    throw Error(path, where + range + " hold " + std::to_string(entry.end - entry.begin) +
                          " bytes, but " + entry.stored_dtype + ir::shape_to_string(dims) +
                          " needs " + std::to_string(needed));
  return entry;
}

// "__metadata__" is free-form text for the writer's use; only its form is checked.
void check_metadata(const std::string& path, const json& metadata) {
  bool ok = metadata.is_object();
  if (ok)
    for (const auto& item : metadata.items()) ok = ok && item.value().is_string();
  if (!ok) throw Error(path, "'__metadata__' must map strings to strings");
}

// Two tensors sharing bytes would alias each other's data: the format forbids it.
void check_no_overlap(const std::string& path,
                      const std::map<std::string, SafetensorsEntry>& entries) {
  std::vector<const std::pair<const std::string, SafetensorsEntry>*> by_offset;
  for (const auto& item : entries) by_offset.push_back(&item);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->second.begin < b->second.begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [prev_name, prev] = *by_offset[i - 1];
    const auto& [name, entry] = *by_offset[i];
    if (entry.begin < prev.end)
      throw Error(path, "tensors '" + escape_for_message(prev_name) + "' and '" +
                            escape_for_message(name) + "' overlap: data_offsets " +
                            range_text(prev.begin, prev.end) + " and " +
                            range_text(entry.begin, entry.end));
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  check_readable_file(path, "a safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open file (" + errno_text(errno) + ")");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < kLengthSize)
    throw Error(path, "file is truncated: " + std::to_string(file_size) +
                          " bytes, too short for the 8-byte header length");

  unsigned char length_bytes[kLengthSize];
  in.read(reinterpret_cast<char*>(length_bytes), kLengthSize);
  uint64_t header_size = 0;
  for (uint64_t i = 0; i < kLengthSize; ++i) header_size |= uint64_t{length_bytes[i]} << (8 * i);
  if (header_size > file_size - kLengthSize)
    throw Error(path, "header length " + std::to_string(header_size) +
                          " runs past the end of the file (" + std::to_string(file_size) +
                          " bytes)");
  if (header_size > kMaxHeaderSize)
    throw Error(path, "header length " + std::to_string(header_size) +
                          " is over the 100 MB limit; the file is probably corrupt");

  std::string header_text(header_size, '\0');
  in.read(header_text.data(), std::streamsize(header_size));
  if (static_cast<uint64_t>(in.gcount()) != header_size)
    throw Error(path, "read failed (" + errno_text(errno) + ")");
  const json header =
      parse_json_text(header_text, path, JsonLocation::ByteOffset, "header is not valid JSON");
  if (!header.is_object()) throw Error(path, "header is not a JSON object");

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = kLengthSize + header_size;
  const uint64_t data_size = file_size - file.data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      check_metadata(path, value);
      for (const auto& item : value.items()) file.metadata_[item.key()] = item.value().get<std::string>();
      continue;
    }
    file.entries_.emplace(name, parse_entry(path, name, value, data_size));
  }
  check_no_overlap(path, file.entries_);
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

ir::Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsEntry* entry = find(name);
  if (entry == nullptr) throw Error(path_, "no tensor named '" + escape_for_message(name) + "'");
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw Error(path_, "cannot open file (" + errno_text(errno) + ")");
  const uint64_t size = entry->end - entry->begin;
  std::vector<std::byte> bytes(size);
  in.seekg(static_cast<std::streamoff>(data_start_ + entry->begin));
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
  if (!in || static_cast<uint64_t>(in.gcount()) != size)
    throw Error(path_, "tensor '" + escape_for_message(name) + "': the file changed since its header was read (" +
                           std::to_string(in.gcount() < 0 ? 0 : in.gcount()) + " of " +
                           std::to_string(size) + " bytes could be read)");
  return tensor_from_stored_bytes(entry->type, std::move(bytes));
}

void write_safetensors(const std::string& path, const std::map<std::string, ir::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<std::string_view> data;
  for (const auto& [name, tensor] : tensors) {
    const StoredDType* stored = nullptr;
    for (const StoredDType& entry : kStoredDTypes)
      if (entry.dtype == tensor.dtype()) {
        stored = &entry;
        break;
      }
    KILN_CHECK(stored != nullptr) << "no safetensors dtype for " << ir::dtype_name(tensor.dtype());
    header[name] = {{"dtype", std::string(stored->name)},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.byte_size()}}};
    offset += tensor.byte_size();
    data.push_back(tensor_bytes_view(tensor));
  }
  // The format allows trailing spaces in the header; they align the data section.
  std::string header_text = header.dump();
  const uint64_t align = kSafetensorsHeaderAlignment;
  header_text.append((align - header_text.size() % align) % align, ' ');
  std::string length(kLengthSize, '\0');
  for (uint64_t i = 0; i < kLengthSize; ++i)
    length[i] = static_cast<char>((header_text.size() >> (8 * i)) & 0xFF);

  std::vector<std::string_view> pieces{length, header_text};
  pieces.insert(pieces.end(), data.begin(), data.end());
  write_file_atomically(path, pieces);
}

}  // namespace kiln::compiler
