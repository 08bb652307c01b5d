// The package file, byte by byte (all integers little-endian):
//
//   offset  size  field
//        0     8  magic: 89 'K' 'I' 'L' 'N' 0D 0A 1A (as PNG's: a text-mode copy mangles it)
//        8     4  format version (kPackageFormatVersion)
//       12     4  header size (64)
//       16     8  file size: the whole file, so a truncated copy is told from a corrupt one
//       24     8  manifest size (the manifest starts at 64)
//       32     4  CRC-32 of the manifest
//       36     4  CRC-32 of bytes 0..35
//       40    24  zero
//       64     *  manifest: JSON (format below), then the sections, each at a multiple of 64
//
// The manifest is PackageManifest's fields plus "programs" (role, kernel table, ptxas report,
// and the names of its source/PTX/cubin sections), "weights" (name, type and place in the
// weights section of each tensor) and "sections" (name, offset, size, CRC-32 of each). The
// format is documented for users in docs/packages.md.
#include "runtime/package/package.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/float_storage.h"
#include "ir/parallel.h"
#include "runtime/compile/mapped_file.h"
#include "runtime/cuda/plan.h"
#include "runtime/package/program_json.h"
#include "runtime/package/sparse_weights.h"

namespace kiln::runtime {
namespace {

constexpr unsigned char kMagic[8] = {0x89, 'K', 'I', 'L', 'N', 0x0D, 0x0A, 0x1A};
constexpr size_t kHeaderBytes = 64;
constexpr size_t kSectionAlignment = 64;

uLong crc32_serial(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes sizes as uInt: feed large sections in pieces.
  while (!bytes.empty()) {
    const size_t piece = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(piece));
    bytes.remove_prefix(piece);
  }
  return crc;
}

// The CRC-32 of `bytes`. A large section (ResNet-50's weights: 102 MB, 39 ms for zlib on one
// core) is cut into one piece per core, whose CRCs crc32_combine joins into the same value.
uint32_t crc32_of(std::string_view bytes) {
  const ir::Pieces pieces = ir::pieces_per_core(static_cast<int64_t>(bytes.size()), int64_t{8} << 20);
  const auto piece_bytes = [&](int64_t piece) {
    return bytes.substr(static_cast<size_t>(pieces.begin(piece)),
                        static_cast<size_t>(pieces.end(piece) - pieces.begin(piece)));
  };
  std::vector<uLong> crcs(static_cast<size_t>(pieces.count));
  ir::run_pieces(pieces, [&](int64_t piece) { crcs[static_cast<size_t>(piece)] = crc32_serial(piece_bytes(piece)); });
  uLong crc = crcs[0];
  for (int64_t piece = 1; piece < pieces.count; ++piece)
    crc = crc32_combine(crc, crcs[static_cast<size_t>(piece)], static_cast<z_off_t>(piece_bytes(piece).size()));
  return static_cast<uint32_t>(crc);
}

template <typename T>
void put(std::string& out, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

template <typename T>
T get(std::string_view in, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  return value;
}

size_t aligned(size_t n) { return (n + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment; }

// Sections in the order they are laid out.
struct SectionList {
  std::vector<std::pair<std::string, std::string_view>> sections;
  void add(std::string name, std::string_view bytes) { sections.emplace_back(std::move(name), bytes); }
};

std::string section_name(const PackageProgram& p, const std::string& part) { return p.role + "." + part; }

}  // namespace

const PackageProgram* Package::find(std::string_view role) const {
  for (const PackageProgram& program : programs)
    if (program.role == role) return &program;
  return nullptr;
}

const ir::Tensor& Package::weights_for(const codegen::Buffer& buffer, const std::string& path) const {
  auto it = weights.find(buffer.name);
  if (it == weights.end()) throw Error(path, "the package has no weights for parameter '" + buffer.name + "'");
  if (it->second.type() != buffer.type)
    throw Error(path, fmt::format("weights '{}' are {}, the program takes {}", buffer.name,
                                  it->second.type().to_string(), buffer.type.to_string()));
  return it->second;
}

std::vector<ir::Tensor> Package::parameters(const codegen::Program& program, const std::string& path) const {
  std::vector<ir::Tensor> tensors;
  for (int id : program.buffer_ids(codegen::BufferRole::Parameter))
    tensors.push_back(weights_for(program.buffers[id], path));
  return tensors;
}

namespace {

// One weight as the file holds it: narrowed to --weights-dtype, and bitmask-encoded when that is
// smaller (pruned weights).
struct StoredWeight {
  std::optional<ir::Tensor> narrowed;  // when the dtype changed
  std::optional<BitmaskEncoded> sparse;
};

StoredWeight stored_form(const std::string& name, const ir::Tensor& computed, ir::DType weights_dtype) {
  StoredWeight stored;
  // f32 weights stored narrower (--weights-dtype): build_package rounded them already, so
  // this conversion is exact and cannot overflow. Others are kept as they are, uncopied.
  if (weights_dtype != ir::DType::F32 && computed.dtype() == ir::DType::F32) {
    std::string error;
    stored.narrowed = ir::narrowed_for_storage(computed, weights_dtype, &error);
    if (!stored.narrowed) throw Error("", fmt::format("weights '{}': {}", name, error));
  }
  stored.sparse = encode_bitmask(stored.narrowed ? *stored.narrowed : computed);
  return stored;
}

}  // namespace

StoredWeights stored_weights(const Package& package) {
  // Sized, not encoded: the weights are already rounded to their storage dtype (and -0.0 made
  // +0.0) by whoever built the package, so an element is zero there exactly when it is here.
  StoredWeights summary;
  for (const auto& [name, computed] : package.weights) {
    ir::TensorType stored = computed.type();
    if (package.weights_dtype != ir::DType::F32 && stored.dtype == ir::DType::F32) stored.dtype = package.weights_dtype;
    const int64_t dense = ir::num_elements(stored.shape) * static_cast<int64_t>(ir::dtype_size(stored.dtype));
    const int64_t nonzeros = count_nonzeros(computed);
    const bool sparse = stored_as_bitmask(stored, nonzeros);
    summary.bytes += sparse ? bitmask_encoded_bytes(stored, nonzeros) : dense;
    summary.dense_bytes += dense;
    summary.sparse += sparse;
  }
  return summary;
}

std::string serialize_package(const Package& package) {
  // The weights section: every tensor at a multiple of the alignment.
  std::string weights;
  Json weight_list = Json::array();
  for (const auto& [name, computed] : package.weights) {
    const StoredWeight stored = stored_form(name, computed, package.weights_dtype);
    const ir::Tensor& tensor = stored.narrowed ? *stored.narrowed : computed;
    weights.resize(aligned(weights.size()), '\0');
    Json entry = {{"name", name},
                  {"dtype", std::string(ir::dtype_name(tensor.dtype()))},
                  {"shape", tensor.shape()},
                  {"offset", weights.size()}};
    if (stored.sparse) {
      entry["bytes"] = stored.sparse->bytes.size();
      entry["encoding"] = std::string(kBitmaskEncoding);
      entry["nonzeros"] = stored.sparse->nonzeros;
      weights.append(stored.sparse->bytes);
    } else {
      entry["bytes"] = tensor.byte_size();
      weights.append(reinterpret_cast<const char*>(tensor.data()), tensor.byte_size());
    }
    weight_list.push_back(std::move(entry));
  }

  SectionList list;
  Json programs = Json::array();
  for (const PackageProgram& p : package.programs) {
    Json cubins = Json::object();
    list.add(section_name(p, "source"), p.program.source);
    if (!p.binary.ptx.empty()) list.add(section_name(p, "ptx"), p.binary.ptx);
    for (const auto& [arch, cubin] : p.binary.cubins) {
      list.add(section_name(p, "cubin." + arch), cubin);
      cubins[arch] = section_name(p, "cubin." + arch);
    }
    programs.push_back({{"role", p.role},
                        {"program", program_to_json(p.program)},
                        {"binary", {{"compiler", p.binary.compiler},
                                    {"ptx_arch", p.binary.ptx_arch},
                                    {"ptx", p.binary.ptx.empty() ? Json() : Json(section_name(p, "ptx"))},
                                    {"cubins", std::move(cubins)},
                                    {"resources", resources_to_json(p.binary.resources)}}},
                        {"source", section_name(p, "source")}});
  }
  list.add("weights", weights);

  const PackageManifest& m = package.manifest;
  Json manifest = {{"format_version", kPackageFormatVersion},
                   {"kiln_version", m.kiln_version},
                   {"model", m.model},
                   {"model_hash", m.model_hash},
                   {"archs", m.archs},
                   {"pipeline", m.pipeline},
                   {"options", m.options},
                   {"report", m.report},
                   {"programs", std::move(programs)},
                   {"weights", std::move(weight_list)}};
  // Section offsets depend on the manifest's size, which depends on the offsets: lay the
  // sections out after a manifest with room reserved, then pad the manifest to that room.
  Json sections = Json::array();
  for (const auto& [name, bytes] : list.sections)
    sections.push_back({{"name", name}, {"offset", 0}, {"bytes", bytes.size()}, {"crc32", crc32_of(bytes)}});
  manifest["sections"] = sections;
  // Each offset is at most 20 digits where the placeholder "0" has one.
  const size_t room = aligned(manifest.dump().size() + 20 * list.sections.size());
  size_t offset = kHeaderBytes + room;
  for (size_t i = 0; i < list.sections.size(); ++i) {
    sections[i]["offset"] = offset;
    offset = aligned(offset + list.sections[i].second.size());
  }
  manifest["sections"] = std::move(sections);
  std::string manifest_text = manifest.dump();
  KILN_CHECK(manifest_text.size() <= room) << "package manifest outgrew its room";
  manifest_text.resize(room, ' ');  // JSON allows trailing whitespace

  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put<uint32_t>(out, 8, kPackageFormatVersion);
  put<uint32_t>(out, 12, kHeaderBytes);
  put<uint64_t>(out, 24, manifest_text.size());
  put<uint32_t>(out, 32, crc32_of(manifest_text));
  out += manifest_text;
  for (const auto& [name, bytes] : list.sections) {
    out.resize(aligned(out.size()), '\0');
    out.append(bytes);
  }
  put<uint64_t>(out, 16, out.size());
  put<uint32_t>(out, 36, crc32_of(std::string_view(out).substr(0, 36)));
  return out;
}

namespace {

// The checked header: where the manifest is.
std::string_view check_header(std::string_view bytes, const std::string& path) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error(path, "not a kiln package (wrong magic bytes); `kiln compile MODEL -o FILE.kiln` makes one");
  if (bytes.size() < kHeaderBytes)
    throw Error(path, fmt::format("truncated package: {} bytes, shorter than the {}-byte header",
                                  bytes.size(), kHeaderBytes));
  if (get<uint32_t>(bytes, 36) != crc32_of(bytes.substr(0, 36)))
    throw Error(path, "corrupt package: the header's checksum does not match");
  const uint32_t version = get<uint32_t>(bytes, 8);
  if (version > kPackageFormatVersion)
    throw Error(path, fmt::format("package format version {} is newer than this kiln reads ({}); "
                                  "use a newer kiln, or recompile the model with this one",
                                  version, kPackageFormatVersion));
  if (version == 0) throw Error(path, "corrupt package: format version 0");
  if (get<uint32_t>(bytes, 12) != kHeaderBytes)
    throw Error(path, fmt::format("corrupt package: header size {}, expected {}",
                                  get<uint32_t>(bytes, 12), kHeaderBytes));
  for (size_t i = 40; i < kHeaderBytes; ++i)  // reserved: no checksum covers them
    if (bytes[i] != '\0')
      throw Error(path, fmt::format("corrupt package: reserved header byte {} is not zero", i));
  const uint64_t file_bytes = get<uint64_t>(bytes, 16);
  if (bytes.size() < file_bytes)
    throw Error(path, fmt::format("truncated package: the header says {} bytes, the file has {} "
                                  "(an interrupted copy?)", file_bytes, bytes.size()));
  if (bytes.size() > file_bytes)
    throw Error(path, fmt::format("corrupt package: {} bytes past the end the header gives ({} bytes)",
                                  bytes.size() - file_bytes, file_bytes));
  const uint64_t manifest_bytes = get<uint64_t>(bytes, 24);
  if (manifest_bytes > file_bytes - kHeaderBytes)
    throw Error(path, "corrupt package: the manifest runs past the end of the file");
  const std::string_view manifest = bytes.substr(kHeaderBytes, manifest_bytes);
  if (get<uint32_t>(bytes, 32) != crc32_of(manifest))
    throw Error(path, "corrupt package: checksum mismatch in the manifest");
  return manifest;
}

// The checksums cover the header's first 36 bytes, the manifest and every section; what lies
// between the manifest and the sections, and between sections, is alignment padding and must be
// zero, so that every byte of a package is covered by a check.
void check_padding(std::string_view bytes, size_t covered_to,
                   std::vector<std::pair<size_t, size_t>> ranges, const std::string& path) {
  std::sort(ranges.begin(), ranges.end());
  auto zeros = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (bytes[i] != '\0')
        throw Error(path, fmt::format("corrupt package: byte {} is padding between sections and "
                                      "is not zero",
                                      i));
  };
  size_t cursor = covered_to;
  for (const auto& [offset, size] : ranges) {
    if (offset > cursor) zeros(cursor, offset);
    cursor = std::max(cursor, offset + size);
  }
  if (cursor < bytes.size()) zeros(cursor, bytes.size());
}

}  // namespace

Package parse_package(std::string_view bytes, const std::string& path) {
  const std::string_view manifest_text = check_header(bytes, path);
  Json manifest_json;
  try {
    manifest_json = Json::parse(manifest_text);
  } catch (const nlohmann::json::exception& error) {
    throw Error(path, std::string("corrupt package: the manifest is not JSON: ") + error.what());
  }
  const JsonAt manifest(manifest_json, "", path);

  // Sections: bounds and checksums first, so that nothing below reads damaged bytes.
  std::map<std::string, std::string_view> sections;
  std::vector<std::pair<size_t, size_t>> section_ranges;  // offset, size
  const JsonAt list = manifest["sections"];
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonAt s = list[i];
    const std::string name = s["name"].string();
    const int64_t offset = s["offset"].integer(), size = s["bytes"].integer();
    if (offset < static_cast<int64_t>(kHeaderBytes) || size < 0 ||
        static_cast<uint64_t>(offset) + static_cast<uint64_t>(size) > bytes.size())
      s.fail(fmt::format("section '{}' lies outside the file", name));
    const std::string_view data = bytes.substr(static_cast<size_t>(offset), static_cast<size_t>(size));
    const uint32_t actual = crc32_of(data);
    if (s["crc32"].integer() != actual)
      throw Error(path, fmt::format("corrupt package: checksum mismatch in section '{}' ({} bytes at "
                                    "offset {}: CRC-32 {:08x}, expected {:08x})",
                                    name, size, offset, actual, s["crc32"].integer()));
    sections.emplace(name, data);
    section_ranges.push_back({static_cast<size_t>(offset), static_cast<size_t>(size)});
  }
  check_padding(bytes, kHeaderBytes + manifest_text.size(), std::move(section_ranges), path);
  auto section = [&](const JsonAt& name) -> std::string_view {
    auto it = sections.find(name.string());
    if (it == sections.end()) name.fail("no section named '" + name.string() + "'");
    return it->second;
  };

  Package package;
  PackageManifest& m = package.manifest;
  m.format_version = static_cast<uint32_t>(manifest["format_version"].integer());
  m.kiln_version = manifest["kiln_version"].string();
  m.model = manifest["model"].string();
  m.model_hash = manifest["model_hash"].string();
  m.archs = manifest["archs"].strings();
  m.pipeline = manifest["pipeline"].strings();
  m.options = manifest["options"].json();
  m.report = manifest["report"].json();

  const JsonAt programs = manifest["programs"];
  for (size_t i = 0; i < programs.size(); ++i) {
    const JsonAt p = programs[i];
    PackageProgram program;
    program.role = p["role"].string();
    program.program = program_from_json(p["program"]);
    program.program.source = std::string(section(p["source"]));
    const JsonAt binary = p["binary"];
    program.binary.compiler = binary["compiler"].string();
    program.binary.ptx_arch = binary["ptx_arch"].string();
    if (!binary["ptx"].json().is_null()) program.binary.ptx = std::string(section(binary["ptx"]));
    const JsonAt cubins = binary["cubins"];
    if (!cubins.json().is_object()) cubins.fail("expected an object");
    for (const auto& [arch, name] : cubins.json().items())
      program.binary.cubins[arch] = std::string(section(cubins[arch]));
    program.binary.resources = resources_from_json(binary["resources"]);
    validate_program(program.program, path, program.role);
    package.programs.push_back(std::move(program));
  }

  auto weights_section = sections.find("weights");
  if (weights_section == sections.end()) list.fail("no section named 'weights'");
  const std::string_view weights = weights_section->second;
  const JsonAt weight_list = manifest["weights"];
  for (size_t i = 0; i < weight_list.size(); ++i) {
    const JsonAt w = weight_list[i];
    const std::string name = w["name"].string();
    std::optional<ir::DType> dtype = ir::parse_dtype(w["dtype"].string());
    if (!dtype) w["dtype"].fail("unknown dtype");
    const ir::TensorType type{*dtype, w["shape"].integers()};
    const std::optional<int64_t> count = ir::checked_num_elements(type.shape);
    const int64_t offset = w["offset"].integer(), size = w["bytes"].integer();
    if (!count) w.fail(fmt::format("weights '{}': {} has too many elements", name, type.to_string()));
    if (offset < 0 || size < 0 || static_cast<uint64_t>(offset) + static_cast<uint64_t>(size) > weights.size())
      w.fail(fmt::format("weights '{}' lie outside the weights section", name));
    const std::string_view stored = weights.substr(static_cast<size_t>(offset), static_cast<size_t>(size));
    if (w.has("encoding")) {
      // Pruned weights: a bitmask of the nonzero elements and their values (sparse_weights.h).
      if (w["encoding"].string() != kBitmaskEncoding)
        w["encoding"].fail(fmt::format("weights '{}': unknown encoding '{}' (this kiln reads '{}')", name,
                                       w["encoding"].string(), kBitmaskEncoding));
      std::string error;
      std::optional<ir::Tensor> tensor = decode_bitmask(stored, type, w["nonzeros"].integer(), &error);
      if (!tensor) w.fail(fmt::format("corrupt package: weights '{}': {}", name, error));
      package.weights.emplace(name, std::move(*tensor));
      continue;
    }
    if (size != *count * static_cast<int64_t>(ir::dtype_size(*dtype)))
      w.fail(fmt::format("weights '{}': {} bytes do not hold a {}", name, size, type.to_string()));
    // Copied in one pass (a sized vector would zero its bytes first).
    const auto* first = reinterpret_cast<const std::byte*>(stored.data());
    package.weights.emplace(name, ir::Tensor(type, std::vector<std::byte>(first, first + size)));
  }
  // Weights stored in bf16 or f16 for f32 parameters (--weights-dtype) widen exactly.
  for (const PackageProgram& program : package.programs)
    for (int id : program.program.buffer_ids(codegen::BufferRole::Parameter)) {
      const codegen::Buffer& buffer = program.program.buffers[id];
      auto it = package.weights.find(buffer.name);
      if (it == package.weights.end() || it->second.dtype() == buffer.type.dtype) continue;
      const ir::DType stored = it->second.dtype();
      it->second = ir::widened_from_storage(std::move(it->second), buffer.type);
      if (it->second.dtype() != stored) package.weights_dtype = stored;
    }
  // Every parameter has weights of its type (checked, not copied).
  for (const PackageProgram& program : package.programs)
    for (int id : program.program.buffer_ids(codegen::BufferRole::Parameter))
      package.weights_for(program.program.buffers[id], path);
  return package;
}

Package read_package(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (!error && std::filesystem::is_directory(status)) throw Error(path, "cannot read: it is a directory");
  if (!error && std::filesystem::is_regular_file(status)) {
    // Mapped, not read: parsing copies what it keeps (the weights into their tensors), so a read
    // would copy ResNet-50's 106 MB twice (load 235 ms with a character iterator, 123 ms with
    // one read, 65 ms mapped).
    const MappedFile mapped(path);
    return parse_package(mapped.bytes(), path);
  }
  // A pipe or a device: read to its end.
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(path, "cannot open: " + std::string(std::strerror(errno)));
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) throw Error(path, "cannot read: " + std::string(std::strerror(errno)));
  return parse_package(bytes, path);
}

bool is_package_file(const std::string& path) {
  // A .kiln file is meant as a package: reading it says what is wrong with it.
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".kiln") == 0) return true;
  std::ifstream file(path, std::ios::binary);
  char head[sizeof kMagic] = {};
  if (!file.read(head, sizeof head)) return false;
  return std::memcmp(head, kMagic, sizeof kMagic) == 0;
}

void require_code_for(const CudaBinary& binary, int sm, const std::string& path) {
  if (cuda::select_code(binary, sm)) return;
  throw Error(path, fmt::format("the package has no code for this GPU (sm_{}): it holds {}; "
                                "recompile it with `kiln compile --arch sm_{}`, or without --no-ptx",
                                sm, cuda::describe_code(binary), sm));
}

}  // namespace kiln::runtime
