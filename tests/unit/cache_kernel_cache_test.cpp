// The on-disk kernel cache: keys, hits and misses, corruption, concurrent writers, info/clear,
// and where the directory comes from.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "ir/diagnostic.h"
#include "runtime/compile/build_identity.h"
#include "runtime/compile/kernel_cache.h"
#include "tests/unit/io_test_util.h"

namespace kiln::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::fresh_test_dir;
using testing_util::read_raw;
using testing_util::write_raw;

CacheKey sample_key() {
  return CacheKey{"cubin", hash_text("__global__ void k() {}"), "nvrtc 13.0", "sm_90",
                  "-std=c++17 -lineinfo", ""};
}

size_t count_files(const fs::path& dir) {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++count;
  return count;
}

// Sets an environment variable for one scope and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CacheKeyTest, HashAndDigestAreStable) {
  EXPECT_EQ(hash_text(""), "cbf29ce484222325");  // the FNV-1a offset basis
  EXPECT_EQ(hash_text("a"), "af63dc4c8601ec8c");
  const CacheKey key = sample_key();
  EXPECT_EQ(key.digest(), sample_key().digest());
  EXPECT_EQ(key.digest().size(), 16u);
  // Field boundaries matter: ("ab", "c") is not ("a", "bc").
  CacheKey left = key, right = key;
  left.target = "ab";
  left.flags = "c";
  right.target = "a";
  right.flags = "bc";
  EXPECT_NE(left.digest(), right.digest());
  EXPECT_NE(key.describe().find("kind=cubin target=sm_90"), std::string::npos);
}

TEST(CacheKeyTest, ContentHashIsXxh3) {
  // XXH3-64's published value for no input: the hash is stable across runs, builds and machines.
  EXPECT_EQ(hash_bytes(""), "2d06800538d394c2");
  EXPECT_NE(hash_bytes(std::string(1 << 20, 'a')), hash_bytes(std::string((1 << 20) + 1, 'a')));
}

TEST(BuildIdentityTest, IsTheLinkersBuildId) {
  // The package cache keys by it; Debian's linker writes a SHA-1 build ID (20 bytes) by default.
  const std::string& identity = build_identity();
  ASSERT_EQ(identity.size(), 40u) << identity;
  EXPECT_EQ(identity.find_first_not_of("0123456789abcdef"), std::string::npos) << identity;
  EXPECT_NE(identity, std::string(40, '0'));
  EXPECT_EQ(&build_identity(), &identity);
}

TEST(CacheTest, OlderFormatEntryIsAQuietMiss) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  const std::string digest = sample_key().digest();
  // What kiln wrote before its checksums became XXH3: not damage, so nothing is reported.
  write_raw(dir / (digest + "." + hash_text("old") + ".bin"), "old");
  write_raw(dir / (digest + ".meta"), "kiln-cache-entry 1\nsize 3\nchecksum " + hash_text("old") +
                                          "\nkey " + sample_key().describe() + "\n");
  ::testing::internal::CaptureStderr();
  std::string why;
  EXPECT_FALSE(cache.lookup(sample_key(), &why));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(why, "an entry in an older format");
  cache.store(sample_key(), "new");
  EXPECT_EQ(cache.read(sample_key()), "new");
}

CacheKey key_for(const std::string& source) {
  CacheKey key = sample_key();
  key.source_hash = hash_text(source);
  return key;
}

TEST(CacheTest, TrimRemovesTheLeastRecentlyUsed) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  const std::string bytes(4096, 'x');
  std::vector<fs::path> payloads;
  for (const char* source : {"a", "b", "c"}) payloads.push_back(cache.store(key_for(source), bytes));
  // Stored a, b, c an hour, two and three hours ago; then a hit on a makes it the most recent.
  const auto now = fs::file_time_type::clock::now();
  for (size_t i = 0; i < payloads.size(); ++i)
    fs::last_write_time(payloads[i], now - std::chrono::hours(3 - i));
  ASSERT_TRUE(cache.lookup(key_for("a")));

  EXPECT_EQ(cache.trim(0), 0) << "0: no limit";
  EXPECT_EQ(cache.trim(cache.info().bytes), 0);
  EXPECT_EQ(cache.trim(cache.info().bytes - 1), 1);
  EXPECT_FALSE(cache.lookup(key_for("b"))) << "b was the least recently used";
  EXPECT_TRUE(cache.lookup(key_for("c")));
  fs::last_write_time(payloads[2], now - std::chrono::hours(1));  // c: used before a again
  // The most recent entry stays even when it alone is over the limit.
  EXPECT_EQ(cache.trim(1), 1);
  EXPECT_EQ(cache.info().entries, 1);
  EXPECT_TRUE(cache.lookup(key_for("a")));
  // The entry named stays, however recently the others were used.
  cache.store(key_for("d"), bytes);
  fs::last_write_time(cache.store(key_for("e"), bytes), now - std::chrono::hours(5));
  const CacheKey newest = key_for("e");
  EXPECT_EQ(cache.trim(1, &newest), 2);
  EXPECT_TRUE(cache.lookup(key_for("e")));
  EXPECT_EQ(cache.info().entries, 1);
}

TEST(CacheTest, SizeLimitFromTheEnvironment) {
  {
    ScopedEnv unset("KILN_CACHE_MAX_SIZE", nullptr);
    EXPECT_EQ(KernelCache::max_bytes_from_environment(), int64_t{10} << 30);
  }
  const std::pair<const char*, int64_t> sizes[] = {
      {"0", 0}, {"4096", 4096}, {"64K", 64 << 10}, {"500M", int64_t{500} << 20}, {"20G", int64_t{20} << 30}};
  for (const auto& [text, bytes] : sizes) {
    ScopedEnv set("KILN_CACHE_MAX_SIZE", text);
    EXPECT_EQ(KernelCache::max_bytes_from_environment(), bytes) << text;
  }
  for (const char* bad : {"ten", "10GB", "-1", "G", "99999999999999G"}) {
    ScopedEnv set("KILN_CACHE_MAX_SIZE", bad);
    EXPECT_THROW(KernelCache::max_bytes_from_environment(), Error) << bad;
  }
}

TEST(CacheTest, StoreThenHit) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  const std::string bytes("\x7f" "ELF\0payload", 11);
  const std::string path = cache.store(sample_key(), bytes);
  std::string why;
  const std::optional<std::string> found = cache.lookup(sample_key(), &why);
  ASSERT_TRUE(found) << why;
  EXPECT_EQ(*found, path);
  EXPECT_EQ(read_raw(*found), bytes) << "the payload file must stay a plain copy of the bytes";
  EXPECT_EQ(cache.read(sample_key()), bytes);
  EXPECT_EQ(count_files(dir), 2u) << "payload + metadata, no temporaries left behind";
}

TEST(CacheTest, MissOnAnyChangedKeyField) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  cache.store(sample_key(), "bytes");
  std::vector<CacheKey> changed(6, sample_key());
  changed[0].kind = "ptx";
  changed[1].source_hash = hash_text("__global__ void k2() {}");
  changed[2].compiler = "nvrtc 13.1";
  changed[3].target = "sm_80";
  changed[4].flags += " --use_fast_math";
  changed[5].prelude_version = "2";
  for (const CacheKey& key : changed) {
    std::string why;
    EXPECT_FALSE(cache.read(key, &why)) << key.describe();
    EXPECT_EQ(why, "no entry");
  }
  EXPECT_TRUE(cache.read(sample_key()));
}

TEST(CacheTest, StoreOverwrites) {
  KernelCache cache(fresh_test_dir().string());
  cache.store(sample_key(), "first");
  cache.store(sample_key(), "second, longer");
  EXPECT_EQ(cache.read(sample_key()), "second, longer");
  EXPECT_EQ(cache.info().entries, 1);
}

// Damages the payload with `damage`, then expects one report, a miss, and a clean rebuild.
void expect_corruption_detected(void (*damage)(const fs::path&), const std::string& what) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  const std::string bytes(4096, 'x');
  const fs::path payload = cache.store(sample_key(), bytes);
  damage(payload);

  ::testing::internal::CaptureStderr();
  std::string why;
  EXPECT_FALSE(cache.lookup(sample_key(), &why));
  std::string second_why;
  EXPECT_FALSE(cache.lookup(sample_key(), &second_why));
  const std::string said = ::testing::internal::GetCapturedStderr();

  EXPECT_NE(why.find(what), std::string::npos) << why;
  EXPECT_NE(why.find("corrupt entry, rebuilding"), std::string::npos) << why;
  EXPECT_EQ(second_why, "no entry") << "the corrupt entry is removed";
  const std::string report = "kiln: cache entry " + sample_key().digest() + " is corrupt (" + what;
  EXPECT_EQ(said.find(report), 0u) << said;
  EXPECT_EQ(said.find(report, 1), std::string::npos) << "reported once: " << said;

  cache.store(sample_key(), bytes);  // the rebuild
  EXPECT_EQ(cache.read(sample_key()), bytes);
}

TEST(CacheTest, FlippedByteIsDetected) {
  expect_corruption_detected(
      [](const fs::path& payload) {
        std::string bytes = read_raw(payload);
        bytes[100] ^= 0x20;
        write_raw(payload, bytes);
      },
      "checksum mismatch");
}

TEST(CacheTest, TruncatedEntryIsDetected) {
  expect_corruption_detected(
      [](const fs::path& payload) { fs::resize_file(payload, 1000); }, "truncated");
}

TEST(CacheTest, HalfWrittenEntriesAreMisses) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  const std::string digest = sample_key().digest();
  // A payload whose metadata never arrived (a writer died between the renames).
  write_raw(dir / (digest + "." + hash_text("orphan") + ".bin"), "orphan");
  std::string why;
  EXPECT_FALSE(cache.read(sample_key(), &why));
  EXPECT_EQ(why, "no entry");
  // Metadata without a payload.
  fs::remove(cache.store(sample_key(), "bytes"));
  EXPECT_FALSE(cache.read(sample_key(), &why));
  EXPECT_NE(why.find("incomplete"), std::string::npos) << why;
  // Garbage metadata is corruption.
  cache.store(sample_key(), "bytes");
  write_raw(dir / (digest + ".meta"), "not kiln metadata");
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.read(sample_key(), &why));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("unreadable metadata"),
            std::string::npos);
}

TEST(CacheTest, InfoAndClearTouchOnlyCacheFiles) {
  const fs::path dir = fresh_test_dir();
  KernelCache cache(dir.string());
  for (int i = 0; i < 3; ++i) {
    CacheKey key = sample_key();
    key.target = "sm_" + std::to_string(80 + i);
    cache.store(key, std::string(100 * (i + 1), 'z'));
  }
  const std::string digest = sample_key().digest();
  const std::string stray_payload = digest + "." + hash_text("x") + ".bin.tmp.12345.abc.0";
  write_raw(dir / stray_payload, "stray temporary");
  write_raw(dir / (digest + ".meta.tmp.12345.abc.1"), "stray temporary");
  write_raw(dir / "README.txt", "not ours");
  write_raw(dir / (digest + ".txt"), "not ours either");
  write_raw(dir / (digest + ".bin"), "not ours either");
  fs::create_directories(dir / "0123456789abcdef.meta");  // a directory named like an entry

  const CacheInfo info = cache.info();
  EXPECT_EQ(info.directory, dir.string());
  EXPECT_EQ(info.entries, 3);
  EXPECT_GE(info.bytes, 600);

  EXPECT_EQ(cache.clear(), 3);
  EXPECT_EQ(cache.info().entries, 0);
  EXPECT_TRUE(fs::exists(dir / "README.txt"));
  EXPECT_TRUE(fs::exists(dir / (digest + ".txt")));
  EXPECT_TRUE(fs::exists(dir / (digest + ".bin")));
  EXPECT_TRUE(fs::is_directory(dir / "0123456789abcdef.meta"));
  EXPECT_FALSE(fs::exists(dir / stray_payload));
  EXPECT_FALSE(fs::exists(dir / (digest + ".meta.tmp.12345.abc.1")));
  EXPECT_EQ(count_files(dir), 4u);
}

TEST(CacheTest, CreatesMissingDirectory) {
  const fs::path dir = fresh_test_dir() / "a" / "b" / "kiln";
  KernelCache cache(dir.string());
  EXPECT_TRUE(fs::is_directory(dir));
  cache.store(sample_key(), "x");
  EXPECT_EQ(cache.info().entries, 1);
}

TEST(CacheTest, UnusableDirectoryIsErrorNamingIt) {
  const fs::path file = fresh_test_dir() / "plain_file";
  write_raw(file, "");
  const std::string dir = (file / "kiln").string();  // cannot exist: its parent is a file
  try {
    KernelCache cache(dir);
    FAIL() << "expected kiln::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().location, dir);
    EXPECT_NE(std::string(error.what()).find("KILN_CACHE_DIR"), std::string::npos);
  }
}

TEST(CacheTest, DefaultDirectoryFromEnvironment) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv kiln("KILN_CACHE_DIR", "/tmp/kiln-cache-here");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(KernelCache::default_directory(), "/tmp/kiln-cache-here");
  }
  {
    ScopedEnv kiln("KILN_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(KernelCache::default_directory(), "/xdg/kiln");
  }
  {
    ScopedEnv kiln("KILN_CACHE_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/is/ignored");
    EXPECT_EQ(KernelCache::default_directory(), "/home/someone/.cache/kiln");
  }
}

// Two processes store the same key in a loop while this one reads it: every hit must be a
// whole payload, never a prefix or a mix. With `distinct`, each writer stores its own bytes
// (a compiler that is not deterministic): every hit is then one writer's bytes or the other's,
// and no interleaving of the two writers' renames may look like a corrupt entry.
void run_concurrent_writers(bool distinct) {
  const fs::path dir = fresh_test_dir();
  // Large enough that a non-atomic write would be caught half-way.
  std::vector<std::string> payloads;
  for (int w = 0; w < 2; ++w) {
    std::string bytes(1 << 20, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 131 + (distinct ? w : 0)) >> 3);
    payloads.push_back(bytes);
  }
  constexpr int kStoresPerWriter = 60;

  ::testing::internal::CaptureStderr();
  std::vector<pid_t> writers;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        KernelCache cache(dir.string());
        for (int i = 0; i < kStoresPerWriter; ++i) cache.store(sample_key(), payloads[w]);
      } catch (...) {
        status = 1;
      }
      ::_exit(status);  // no gtest teardown in the child
    }
    writers.push_back(pid);
  }

  KernelCache cache(dir.string());
  int hits = 0, misses = 0, torn = 0, running = int(writers.size());
  auto read_once = [&] {
    std::optional<std::string> got = cache.read(sample_key());
    if (!got) {
      ++misses;
    } else if (*got == payloads[0] || *got == payloads[1]) {
      ++hits;
    } else {
      ++torn;
    }
  };
  std::vector<int> statuses;
  while (running > 0) {
    read_once();
    for (pid_t& pid : writers) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        statuses.push_back(status);
        pid = -1;
        --running;
      }
    }
  }
  read_once();  // the writers are done: the entry must be there now
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(torn, 0);
  EXPECT_GT(hits, 0);
  for (int status : statuses) EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(said.find("corrupt"), std::string::npos) << said;
  // Payload + metadata; with distinct bytes both writers' payloads (the older one is kept
  // until it is stale, for readers that read the metadata before it was replaced).
  EXPECT_EQ(count_files(dir), distinct ? 3u : 2u) << "no temporaries left behind";
  std::cout << "[ info     ] concurrent reader: " << hits << " hits, " << misses << " misses"
            << (said.empty() ? "" : ", said: " + said) << "\n";
}

TEST(CacheTest, ConcurrentWritersNeverExposePartialEntries) { run_concurrent_writers(false); }

TEST(CacheTest, ConcurrentWritersOfDifferentBytesNeverTear) { run_concurrent_writers(true); }

}  // namespace
}  // namespace kiln::runtime
