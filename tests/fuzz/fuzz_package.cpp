// A package (.kiln, `kiln compile`) through the whole reader: the header and its reserved bytes,
// the section table, every section's bounds and CRC-32, the manifest JSON, the programs' JSON
// (buffers, kernels, memory plan, library calls), the weights (dense or bitmask-encoded) and the
// CUDA binaries' table. runtime/package/package.h.
//
// Each input is read twice: as it is, and resealed. Nearly every mutation of a package breaks a
// CRC-32, so read as it is it rarely gets past the checksums; resealed (the header's file size,
// every in-bounds section's CRC-32, the manifest's and the header's), it reaches what the
// checksums guard, as a package written by a faulty tool or edited and resealed by hand would.
#include <zlib.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/error.h"
#include "runtime/package/package.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// The header's layout (runtime/package/package.cpp): file size at 16, manifest size at 24,
// the manifest's CRC-32 at 32, the CRC-32 of bytes 0..35 at 36; the manifest starts at 64.
constexpr size_t kHeaderBytes = 64;

template <typename T>
T get(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

template <typename T>
void put(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

uint32_t crc32_of(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data),
                                     static_cast<uInt>(size)));
}

// Makes the checksums and the file size match the bytes. Section CRCs are rewritten only when the
// manifest is a JSON object and its new text fits the manifest's room (padded with spaces, as
// kiln writes it); sections out of bounds are left for the reader to refuse.
void reseal(std::string& bytes) {
  if (bytes.size() < kHeaderBytes) return;
  put<uint64_t>(bytes, 16, bytes.size());
  uint64_t manifest_bytes = get<uint64_t>(bytes, 24);
  if (manifest_bytes > bytes.size() - kHeaderBytes) {
    manifest_bytes = bytes.size() - kHeaderBytes;
    put<uint64_t>(bytes, 24, manifest_bytes);
  }
  nlohmann::json manifest = nlohmann::json::parse(bytes.begin() + kHeaderBytes,
                                                  bytes.begin() + kHeaderBytes + static_cast<std::ptrdiff_t>(manifest_bytes),
                                                  nullptr, /*allow_exceptions=*/false);
  if (manifest.is_object() && manifest.contains("sections") && manifest["sections"].is_array()) {
    for (nlohmann::json& section : manifest["sections"]) {
      if (!section.is_object()) continue;
      const auto offset = section.find("offset");
      const auto size = section.find("bytes");
      if (offset == section.end() || size == section.end() || !offset->is_number_unsigned() ||
          !size->is_number_unsigned())
        continue;
      const uint64_t begin = offset->get<uint64_t>(), length = size->get<uint64_t>();
      if (begin > bytes.size() || length > bytes.size() - begin) continue;
      section["crc32"] = crc32_of(bytes.data() + begin, length);
    }
    std::string text = manifest.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() <= manifest_bytes) {
      text.resize(manifest_bytes, ' ');
      bytes.replace(kHeaderBytes, manifest_bytes, text);
    }
  }
  put<uint32_t>(bytes, 32, crc32_of(bytes.data() + kHeaderBytes, manifest_bytes));
  put<uint32_t>(bytes, 36, crc32_of(bytes.data(), 36));
}

void read(const std::string& bytes) {
  try {
    const kiln::runtime::Package package = kiln::runtime::parse_package(bytes, "fuzz.kiln");
    // A package that parses serializes again (what `kiln compile` would have written).
    (void)kiln::runtime::serialize_package(package);
  } catch (const kiln::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(kiln::fuzz::as_text(data, size));
  read(bytes);
  reseal(bytes);
  read(bytes);
  return 0;
}
