// The on-disk cache of compiled code.
//
// Layout: an entry is two files in the cache directory,
//   <digest>.meta             "kiln-cache-entry 2", the payload's size and checksum, the key
//   <digest>.<checksum>.bin   the payload, byte for byte: a cubin, PTX text, a host .so that
//                             dlopen loads straight from the cache (so it carries nothing of
//                             ours), or a package
// where <digest> is CacheKey::digest() and <checksum> the payload's hash_bytes (XXH3: a cached
// package is 100 MB, checked on every lookup). Version 1 entries (FNV-1a checksums) are misses.
//
// Writers write each file to a unique temporary name in the same directory and rename it into
// place (atomic within a file system): first the payload, then the metadata that names it.
// Because the payload's name holds its checksum, a payload file never changes content, and the
// metadata (one file, one rename) always names a payload that was complete before the metadata
// existed. So readers never pair one writer's metadata with another's payload, even when two
// processes store different bytes under one key (a compiler that is not deterministic), and a
// reader that finds the metadata sees a complete entry or a damaged one, never a half-written
// one. A changed payload also gets a new path, which matters to dlopen: it returns the already
// loaded library for a path it has seen, whatever the file holds now.
//
// A lookup needs the metadata and its payload with matching size and checksum; a mismatch
// (bit rot, truncation, someone editing the file) is reported once and the entry removed, so
// that the caller rebuilds it. No fsync: a crash can leave a renamed but empty file, and the
// checksum catches that.
#include "runtime/compile/kernel_cache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>
// Header-only: XXH3 inlined here, nothing to link (Debian's libxxhash-dev).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ir/diagnostic.h"
#include "runtime/compile/mapped_file.h"

namespace kiln::runtime {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMetaMagic = "kiln-cache-entry 2";
constexpr std::string_view kOldMetaMagic = "kiln-cache-entry 1\n";  // FNV-1a checksums
constexpr std::string_view kPayloadSuffix = ".bin";
constexpr std::string_view kMetaSuffix = ".meta";
constexpr std::string_view kTempMarker = ".tmp.";
constexpr size_t kHashLength = 16;
// A payload replaced by one with other bytes is deleted only once it is this old, so that a
// reader or writer that has just read the previous metadata still finds it.
constexpr auto kStalePayloadAge = std::chrono::minutes(1);
constexpr const char* kNoCacheHint =
    " (set KILN_CACHE_DIR to a writable directory, or pass --no-cache)";

uint64_t fnv1a(std::string_view text, uint64_t hash = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string hex16(uint64_t value) { return fmt::format("{:016x}", value); }

bool is_hash(std::string_view text) {
  if (text.size() != kHashLength) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

enum class FileKind { Payload, Meta, Temp, Foreign };

// What a directory entry is, by name alone: clear() and info() must never touch a file that is
// not ours, even when KILN_CACHE_DIR points somewhere shared by mistake.
FileKind classify(std::string_view name, std::string* digest = nullptr) {
  if (name.size() < kHashLength || !is_hash(name.substr(0, kHashLength))) return FileKind::Foreign;
  if (digest) *digest = std::string(name.substr(0, kHashLength));
  std::string_view rest = name.substr(kHashLength);
  if (rest == kMetaSuffix) return FileKind::Meta;
  if (starts_with(rest, std::string(kMetaSuffix) + std::string(kTempMarker))) return FileKind::Temp;
  // ".<checksum>.bin", perhaps followed by a temporary marker.
  if (rest.size() < 1 + kHashLength || rest[0] != '.' || !is_hash(rest.substr(1, kHashLength)))
    return FileKind::Foreign;
  rest = rest.substr(1 + kHashLength);
  if (rest == kPayloadSuffix) return FileKind::Payload;
  if (starts_with(rest, std::string(kPayloadSuffix) + std::string(kTempMarker)))
    return FileKind::Temp;
  return FileKind::Foreign;
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return bytes.str();
}

struct Meta {
  uint64_t size = 0;
  std::string checksum;
  std::string key;
};

std::string render_meta(const Meta& meta) {
  return fmt::format("{}\nsize {}\nchecksum {}\nkey {}\n", kMetaMagic, meta.size, meta.checksum,
                     meta.key);
}

std::optional<Meta> parse_meta(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kMetaMagic) return std::nullopt;
  Meta meta;
  bool have_size = false;
  while (std::getline(in, line)) {
    if (starts_with(line, "size ")) {
      char* end = nullptr;
      meta.size = std::strtoull(line.c_str() + 5, &end, 10);
      have_size = line.size() > 5 && end && *end == '\0';
    } else if (starts_with(line, "checksum ")) {
      meta.checksum = line.substr(9);
    } else if (starts_with(line, "key ")) {
      meta.key = line.substr(4);
    }
  }
  if (!have_size || !is_hash(meta.checksum)) return std::nullopt;
  return meta;
}

// Corrupt entries reported but still on disk (their removal failed, e.g. a read-only
// directory): every later lookup trips over them again, and one report is enough.
std::mutex reported_mutex;
std::set<std::string> reported_corrupt;

void report_corrupt_once(const std::string& digest, const std::string& what) {
  std::lock_guard<std::mutex> lock(reported_mutex);
  if (!reported_corrupt.insert(digest).second) return;
  std::cerr << "kiln: cache entry " << digest << " is corrupt (" << what << "); rebuilding\n";
}

// The entry is gone, so a later corruption of its rebuilt version is news again.
void forget_reported(const std::string& digest) {
  std::lock_guard<std::mutex> lock(reported_mutex);
  reported_corrupt.erase(digest);
}

// pid + a per-process counter + a random per-process salt: unique across processes (pids repeat
// across containers sharing a directory, hence the salt) and threads.
std::string temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {
    std::random_device device;
    return (uint64_t(device()) << 32) ^ device();
  }();
  return fmt::format("{}{}.{:x}.{}", kTempMarker, ::getpid(), salt, counter++);
}

std::string errno_text() { return std::strerror(errno); }

// Writes `bytes` to a fresh temporary file next to `final_path` and renames it into place.
void write_atomically(const fs::path& final_path, std::string_view bytes, const std::string& dir) {
  const fs::path temp = final_path.string() + temp_suffix();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(dir, "cannot write to the kiln cache directory: " + errno_text() + kNoCacheHint);
  auto fail = [&](const std::string& what) {
    const std::string why = errno_text();
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw Error(dir, fmt::format("cannot {} {}: {}", what, temp.string(), why));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write the kiln cache entry");
    done += size_t(n);
  }
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(temp.c_str());
    throw Error(dir, "cannot write the kiln cache entry " + temp.string() + ": " + why);
  }
  if (::rename(temp.c_str(), final_path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp.c_str());
    throw Error(dir, "cannot rename " + temp.string() + " to " + final_path.string() + ": " + why);
  }
}

fs::path meta_path(const std::string& dir, const std::string& digest) {
  return fs::path(dir) / (digest + std::string(kMetaSuffix));
}

fs::path payload_path(const std::string& dir, const std::string& digest,
                      const std::string& checksum) {
  return fs::path(dir) / (digest + "." + checksum + std::string(kPayloadSuffix));
}

}  // namespace

std::string hash_text(std::string_view text) { return hex16(fnv1a(text)); }

std::string hash_bytes(std::string_view bytes) { return hex16(XXH3_64bits(bytes.data(), bytes.size())); }

std::string CacheKey::digest() const {
  // Length-prefixed fields: ("ab", "c") and ("a", "bc") must not collide.
  uint64_t hash = fnv1a("kiln-cache-key");
  for (const std::string* field : {&kind, &source_hash, &compiler, &target, &flags,
                                   &prelude_version}) {
    hash = fnv1a(std::to_string(field->size()) + ":", hash);
    hash = fnv1a(*field, hash);
  }
  return hex16(hash);
}

std::string CacheKey::describe() const {
  std::string text = fmt::format("kind={} target={} compiler='{}' source={} flags='{}'", kind,
                                 target, compiler, source_hash, flags);
  if (!prelude_version.empty()) text += " prelude=" + prelude_version;
  return text;
}

KernelCache::KernelCache(std::string directory) : directory_(std::move(directory)) {
  KILN_CHECK(!directory_.empty()) << "empty kiln cache directory";
  std::error_code error;
  fs::create_directories(directory_, error);
  if (error || !fs::is_directory(directory_))
    throw Error(directory_, "cannot create the kiln cache directory: " +
                                (error ? error.message() : std::string("not a directory")) +
                                kNoCacheHint);
  if (::access(directory_.c_str(), W_OK | X_OK) != 0)
    throw Error(directory_, "the kiln cache directory is not writable: " + errno_text() +
                                kNoCacheHint);
}

std::string KernelCache::default_directory() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  if (std::string dir = env("KILN_CACHE_DIR"); !dir.empty()) return dir;
  // The XDG base directory spec says to ignore a relative XDG_CACHE_HOME.
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/')
    return xdg + "/kiln";
  std::string home = env("HOME");
  if (home.empty())
    if (const passwd* entry = ::getpwuid(::getuid()); entry && entry->pw_dir)
      home = entry->pw_dir;
  if (home.empty()) return fmt::format("/tmp/kiln-cache-{}", ::getuid());
  return home + "/.cache/kiln";
}

namespace {

struct Verified {
  std::unique_ptr<MappedFile> mapped;  // the verified payload
  fs::path payload;
  std::string why;      // on a miss
  std::string corrupt;  // non-empty: the entry exists but is damaged
};

Verified verify(const std::string& dir, const CacheKey& key) {
  Verified result;
  const std::optional<std::string> meta_text = read_file(meta_path(dir, key.digest()));
  if (!meta_text) {
    result.why = "no entry";
    return result;
  }
  const std::optional<Meta> meta = parse_meta(*meta_text);
  if (!meta && starts_with(*meta_text, kOldMetaMagic)) {
    // Not damage: an older kiln's entry, with another checksum. store() replaces it.
    result.why = "an entry in an older format";
    return result;
  }
  if (!meta) {
    result.corrupt = "unreadable metadata";
    return result;
  }
  if (meta->key != key.describe()) {
    // Two keys with one digest: not damage, just not ours. The caller overwrites it.
    result.why = "digest collision with another key";
    return result;
  }
  result.payload = payload_path(dir, key.digest(), meta->checksum);
  std::error_code error;
  if (!fs::is_regular_file(result.payload, error)) {
    result.why = "incomplete entry (payload missing)";
    return result;
  }
  std::unique_ptr<MappedFile> mapped;
  try {
    mapped = std::make_unique<MappedFile>(result.payload.string());
  } catch (const Error&) {
    result.why = "incomplete entry (payload unreadable)";
    return result;
  }
  const std::string_view bytes = mapped->bytes();
  if (bytes.size() != meta->size) {
    result.corrupt = fmt::format("truncated: {} of {} bytes", bytes.size(), meta->size);
    return result;
  }
  if (hash_bytes(bytes) != meta->checksum) {
    result.corrupt = "checksum mismatch";
    return result;
  }
  result.mapped = std::move(mapped);
  return result;
}

// verify(), plus what a damaged entry calls for: one report, and removal so that it is rebuilt.
Verified fetch(const std::string& dir, const CacheKey& key, std::string* why) {
  Verified result = verify(dir, key);
  if (result.mapped) return result;
  if (!result.corrupt.empty()) {
    const std::string digest = key.digest();
    report_corrupt_once(digest, result.corrupt);
    std::error_code meta_error, payload_error;
    fs::remove(meta_path(dir, digest), meta_error);
    if (!result.payload.empty()) fs::remove(result.payload, payload_error);
    if (!meta_error && !payload_error) forget_reported(digest);
    result.why = result.corrupt + " (corrupt entry, rebuilding)";
  }
  if (why) *why = result.why;
  return result;
}

// A hit sets the payload's modification time: trim() removes the least recently used first.
// Best effort (a read-only cache still serves hits).
void mark_used(const fs::path& payload) { ::utimensat(AT_FDCWD, payload.c_str(), nullptr, 0); }

}  // namespace

std::optional<std::string> KernelCache::read(const CacheKey& key, std::string* why) const {
  const Verified result = fetch(directory_, key, why);
  if (!result.mapped) return std::nullopt;
  mark_used(result.payload);
  return std::string(result.mapped->bytes());
}

std::optional<std::string> KernelCache::lookup(const CacheKey& key, std::string* why) const {
  const Verified result = fetch(directory_, key, why);
  if (!result.mapped) return std::nullopt;
  mark_used(result.payload);
  return result.payload.string();
}

std::string KernelCache::store(const CacheKey& key, std::string_view bytes) const {
  const std::string digest = key.digest();
  const Meta meta{bytes.size(), hash_bytes(bytes), key.describe()};
  const fs::path payload = payload_path(directory_, digest, meta.checksum);

  // The payload this entry named before, if its bytes differ: deleted below once stale.
  std::optional<fs::path> previous;
  if (std::optional<std::string> old_text = read_file(meta_path(directory_, digest)))
    if (std::optional<Meta> old = parse_meta(*old_text); old && old->checksum != meta.checksum)
      previous = payload_path(directory_, digest, old->checksum);

  write_atomically(payload, bytes, directory_);
  write_atomically(meta_path(directory_, digest), render_meta(meta), directory_);

  if (previous) {
    std::error_code error;
    const auto modified = fs::last_write_time(*previous, error);
    if (!error && fs::file_time_type::clock::now() - modified > kStalePayloadAge)
      fs::remove(*previous, error);
  }
  return payload.string();
}

CacheInfo KernelCache::info() const {
  CacheInfo info;
  info.directory = directory_;
  std::set<std::string> payloads, metas;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory_, error)) {
    std::string digest;
    const FileKind kind = classify(entry.path().filename().string(), &digest);
    std::error_code type_error;
    if (kind == FileKind::Foreign || !entry.is_regular_file(type_error)) continue;
    std::error_code size_error;
    const auto size = entry.file_size(size_error);
    if (!size_error) info.bytes += int64_t(size);
    if (kind == FileKind::Payload) payloads.insert(digest);
    if (kind == FileKind::Meta) metas.insert(digest);
  }
  for (const std::string& digest : metas) info.entries += int64_t(payloads.count(digest));
  return info;
}

int64_t KernelCache::clear() const {
  std::error_code error;
  std::vector<fs::path> doomed;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory_, error)) {
    std::error_code type_error;
    if (classify(entry.path().filename().string()) == FileKind::Foreign ||
        !entry.is_regular_file(type_error))
      continue;
    doomed.push_back(entry.path());
  }
  int64_t removed = 0;
  for (const fs::path& path : doomed) {
    std::error_code remove_error;
    const bool gone = fs::remove(path, remove_error);
    if (gone && classify(path.filename().string()) == FileKind::Meta) ++removed;
  }
  return removed;
}

int64_t KernelCache::trim(int64_t max_bytes, const CacheKey* keep) const {
  struct Entry {
    // file_clock's epoch is in the future: today's times are negative, so not {}.
    fs::file_time_type used = fs::file_time_type::min();
    int64_t bytes = 0;
    std::vector<fs::path> files;
  };
  std::map<std::string, Entry> entries;  // by digest
  int64_t total = 0;
  std::error_code error;
  for (const fs::directory_entry& file : fs::directory_iterator(directory_, error)) {
    std::string digest;
    const FileKind kind = classify(file.path().filename().string(), &digest);
    std::error_code file_error;
    if ((kind != FileKind::Payload && kind != FileKind::Meta) || !file.is_regular_file(file_error))
      continue;
    Entry& entry = entries[digest];
    const auto size = file.file_size(file_error);
    if (!file_error) {
      entry.bytes += int64_t(size);
      total += int64_t(size);
    }
    if (kind == FileKind::Payload) entry.used = std::max(entry.used, file.last_write_time(file_error));
    entry.files.push_back(file.path());
  }
  if (max_bytes <= 0 || total <= max_bytes) return 0;
  const std::string kept = keep ? keep->digest() : "";
  std::vector<const Entry*> oldest_first;
  for (const auto& [digest, entry] : entries)
    if (digest != kept) oldest_first.push_back(&entry);
  std::sort(oldest_first.begin(), oldest_first.end(),
            [](const Entry* a, const Entry* b) { return a->used < b->used; });
  if (!keep && !oldest_first.empty()) oldest_first.pop_back();  // the most recent stays
  int64_t removed = 0;
  for (const Entry* entry : oldest_first) {
    if (total <= max_bytes) break;
    // The metadata first: a reader then misses instead of finding it without its payload.
    std::vector<fs::path> files = entry->files;
    std::stable_partition(files.begin(), files.end(),
                          [](const fs::path& p) { return p.extension() == kMetaSuffix; });
    for (const fs::path& file : files) fs::remove(file, error);
    total -= entry->bytes;
    ++removed;
  }
  return removed;
}

int64_t KernelCache::max_bytes_from_environment() {
  constexpr int64_t kDefault = int64_t{10} << 30;
  const char* value = std::getenv("KILN_CACHE_MAX_SIZE");
  if (value == nullptr || *value == '\0') return kDefault;
  const std::string text = value;
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  if (digits == 0 || digits > 15 || shift < 0 || std::stoll(text.substr(0, digits)) > (INT64_MAX >> shift))
    throw Error("KILN_CACHE_MAX_SIZE", "'" + text + "' is not a size: bytes, or a number with K, M or G "
                                       "(10G); 0 for no limit");
  return std::stoll(text.substr(0, digits)) << shift;
}

}  // namespace kiln::runtime
