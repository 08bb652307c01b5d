// codegen::Program and the ptxas report as JSON, for the package manifest. The CUDA source,
// PTX and cubins are not in the JSON: they are sections of their own (package.cpp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/program.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::runtime {

using Json = nlohmann::ordered_json;

// A JSON value with where it is (a JSON pointer into the manifest) and which file it came from,
// so that a malformed manifest is reported as "model.kiln: manifest /programs/0/kernels/3:
// 'grid' must be a list of 3 numbers", never as an exception of the JSON library.
class JsonAt {
 public:
  JsonAt(const Json& json, std::string pointer, const std::string& path)
      : json_(json), pointer_(std::move(pointer)), path_(path) {}

  const Json& json() const { return json_; }
  const std::string& pointer() const { return pointer_; }
  JsonAt operator[](const std::string& key) const;  // the member; an error when missing
  JsonAt operator[](size_t index) const;
  bool has(const std::string& key) const;
  size_t size() const;  // of an array (an error for anything else)

  std::string string() const;
  int64_t integer() const;
  double number() const;
  bool boolean() const;
  std::vector<std::string> strings() const;
  std::vector<int64_t> integers() const;
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const Json& json_;
  std::string pointer_;
  const std::string& path_;
};

Json program_to_json(const codegen::Program& program);
// The program's tables (source left empty). Errors name `at`'s file and pointer.
codegen::Program program_from_json(const JsonAt& at);

Json resources_to_json(const std::vector<KernelResources>& resources);
std::vector<KernelResources> resources_from_json(const JsonAt& at);

// Checks what a backend relies on without checking: every buffer id in range, sizes that match
// types, arena slices inside the arena, launch dimensions a GPU accepts. A package's tables are
// data from a file, so a violation is the file's error (kiln::Error naming `path`).
void validate_program(const codegen::Program& program, const std::string& path,
                      const std::string& what);

}  // namespace kiln::runtime
