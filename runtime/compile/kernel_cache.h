// The on-disk cache of compiled code (cubins, PTX, host shared objects).
//
// Directory: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
// An entry is found by the digest of its CacheKey, which covers everything that changes the
// bytes: the source, the compiler and its version, the target, the flags and the host prelude
// version. Entries are written to a temporary file and renamed into place, so concurrent
// processes sharing the directory never see a half-written entry; each carries a checksum, so
// a corrupt or truncated one is detected, reported once (on stderr) and rebuilt.
// On disk an entry is <digest>.bin (the payload as is, so a host .so can be dlopen'ed from the
// cache) and <digest>.meta (size, checksum, key); see kernel_cache.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::runtime {

struct CacheKey {
  std::string kind;              // "cubin", "ptx", "host-so", "resources"
  std::string source_hash;       // hash of the translation unit (see hash_text)
  std::string compiler;          // "nvrtc 13.0", "g++ 12.2.0"
  std::string target;            // "sm_90", "x86_64"
  std::string flags;             // the compiler flags, joined
  std::string prelude_version;   // host prelude / codegen conventions version

  // Hex digest of all fields: the entry's file name.
  std::string digest() const;
  // "kind=cubin target=sm_90 ..." for --verbose messages.
  std::string describe() const;
};

// 64-bit FNV-1a of `text`, as 16 hex digits (stable across runs and machines): cache keys.
std::string hash_text(std::string_view text);
// XXH3-64 of `bytes`, as 16 hex digits (stable across runs and machines): large contents
// (payload checksums, model files, weights), 20 times faster than FNV-1a.
std::string hash_bytes(std::string_view bytes);

struct CacheInfo {
  std::string directory;
  int64_t entries = 0;
  int64_t bytes = 0;
};

class KernelCache {
 public:
  // Creates `directory` when missing; a kiln::Error names it when it cannot be created or is
  // not writable.
  explicit KernelCache(std::string directory);
  // The directory from the environment (see the file comment).
  static std::string default_directory();

  const std::string& directory() const { return directory_; }

  // The path of a verified entry, or nullopt. On a miss, `why` (when given) says why:
  // "no entry", "checksum mismatch (corrupt entry, rebuilding)", ...
  std::optional<std::string> lookup(const CacheKey& key, std::string* why = nullptr) const;
  // The entry's bytes, verified. nullopt on a miss.
  std::optional<std::string> read(const CacheKey& key, std::string* why = nullptr) const;
  // Stores `bytes` atomically; returns the path of the entry. Throws kiln::Error on I/O failure.
  std::string store(const CacheKey& key, std::string_view bytes) const;

  CacheInfo info() const;
  // Removes every entry (and stray temporary files). Returns how many entries were removed.
  int64_t clear() const;
  // Removes the least recently used entries (a hit counts as a use) until the entries take at
  // most `max_bytes` (0: no limit). `keep`'s entry (the one just stored), else the most recent,
  // always stays. Returns how many were removed. Cheap enough after each large store (a
  // directory listing), not after every small one.
  int64_t trim(int64_t max_bytes, const CacheKey* keep = nullptr) const;

  // The size limit: $KILN_CACHE_MAX_SIZE ("10G", "500M", "64K" or bytes; 0: no limit), else
  // 10 GiB. A kiln::Error names the variable when its value does not parse.
  static int64_t max_bytes_from_environment();

 private:
  std::string directory_;
};

}  // namespace kiln::runtime
