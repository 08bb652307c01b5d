// Shared by the neural-network kernel emitters (nn.cpp, gemm.cpp, pool_norm.cpp): a writer that
// keeps generated code indented one statement a line, attribute access, and the choice of index
// type.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernel_emitter.h"
#include "ir/diagnostic.h"

namespace kiln::codegen::nn {

// Builds a kernel body line by line. Indentation is two spaces a level and starts at one level,
// the body of the kernel function.
class SourceWriter {
 public:
  // `depth` 0 for a fragment that another writer places with lines().
  explicit SourceWriter(int depth = 1) : depth_(depth) {}

  template <typename... Args>
  void line(fmt::format_string<Args...> format, Args&&... args) {
    put(fmt::format(format, std::forward<Args>(args)...));
  }
  // A line declaring `name`, dropped by text() when no other line mentions `name`: templates
  // declare every shape constant and index, and NVRTC warns about the ones a shape leaves unused.
  template <typename... Args>
  void declare(std::string_view name, fmt::format_string<Args...> format, Args&&... args) {
    put(fmt::format(format, std::forward<Args>(args)...));
    lines_.back().declares = name;
  }
  void comment(std::string_view text) { put("// " + std::string(text)); }
  void blank() { lines_.push_back(Line{}); }
  // "head {" and one level deeper; close() ends it.
  template <typename... Args>
  void open(fmt::format_string<Args...> format, Args&&... args) {
    put(fmt::format(format, std::forward<Args>(args)...) + " {");
    ++depth_;
  }
  // `tail` is "};" after a lambda or struct.
  void close(std::string_view tail = "}") {
    --depth_;
    put(std::string(tail));
  }
  // A block of lines (e.g. a hook written by another emitter), each at the current indent.
  void lines(std::string_view block) {
    while (!block.empty()) {
      const size_t end = block.find('\n');
      const std::string_view one = block.substr(0, end);
      if (!one.empty()) put(std::string(one));
      if (end == std::string_view::npos) break;
      block.remove_prefix(end + 1);
    }
  }
  // The text, without the declarations nobody uses.
  std::string text() const;

 private:
  struct Line {
    std::string text;      // indented, no newline
    std::string declares;  // the name a declare() line introduces
  };
  void put(const std::string& statement) {
    lines_.push_back(Line{std::string(static_cast<size_t>(depth_) * 2, ' ') + statement, ""});
  }

  int depth_ = 1;
  std::vector<Line> lines_;
};

// Attributes as inference left them: complete and of the schema's type, so a miss is a bug.
template <typename T>
const T& attr(const ir::Node& node, const std::string& name) {
  const auto it = node.attrs.find(name);
  KILN_CHECK(it != node.attrs.end()) << node.describe() << ": attribute '" << name << "' missing";
  const T* value = std::get_if<T>(&it->second);
  KILN_CHECK(value != nullptr) << node.describe() << ": attribute '" << name << "' mistyped";
  return *value;
}

// "int" when every element offset the kernel forms fits in 32 bits (cheaper address arithmetic),
// "long long" otherwise. `largest` is the element count of the biggest operand or result; the
// factor 2 of headroom covers what threads past the end compute before their bounds check (a
// grid stride, a GEMM tile's overhang: at most one more image or row block).
inline std::string_view index_type(int64_t largest) {
  return largest <= (int64_t{1} << 30) ? "int" : "long long";
}

// Whether `code` (one or more lines; // comments ignored) uses the identifier `name`.
bool mentions(std::string_view code, std::string_view name);

// The element count of the largest operand or result of `node`.
int64_t largest_tensor(const ir::Node& node);

// Registration of the pooling, bias and normalization emitters (pool_norm.cpp).
void add_pool_norm_emitters(EmitterTable& table);

}  // namespace kiln::codegen::nn
