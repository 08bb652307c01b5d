// Helpers for the tensor-file and parameter tests: scratch directories, raw files, errors.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ir/diagnostic.h"

namespace kiln::testing_util {

// The scratch directory of a test (in this process).
inline std::filesystem::path test_dir_of(const ::testing::TestInfo& info) {
  return std::filesystem::path(::testing::TempDir()) /
         ("kiln_" + std::string(info.test_suite_name()) + "_" + info.name() + "_" + std::to_string(::getpid()));
}

// Removes a test's scratch directory when the test passes; a failing test's stays to be looked at.
class ScratchDirCleaner : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result() != nullptr && info.result()->Passed()) {
      std::error_code ignored;
      std::filesystem::remove_all(test_dir_of(info), ignored);
    }
  }
};
inline const bool kScratchDirCleanerInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ScratchDirCleaner);
  return true;
}();

// A fresh, empty directory named after the running test, so tests never see each other's files.
inline std::filesystem::path fresh_test_dir() {
  const std::filesystem::path dir = test_dir_of(*::testing::UnitTest::GetInstance()->current_test_info());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_raw(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_raw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The diagnostic of the kiln::Error that `fn` throws; a test failure if it throws none.
template <typename Fn>
Diagnostic error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.diagnostic();
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return {};
}

// Whether /usr/bin/python3 can import numpy (the interop tests skip without it).
inline bool have_numpy() {
  return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

}  // namespace kiln::testing_util
