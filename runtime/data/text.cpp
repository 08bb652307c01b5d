// Byte-level text datasets (text.h).
#include "runtime/data/text.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "ir/diagnostic.h"

namespace kiln::data {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kTextPrefix = "text:";
constexpr int64_t kTestEvery = 10;  // window i is a test sample when i % 10 == 9

std::string fmt_bytes(size_t bytes) { return std::to_string(bytes) + " bytes"; }

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string(), std::string("cannot read: ") + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path.string(), "read error");
  return bytes;
}

// The corpus: one file, or a directory's text files in name order. `what` describes it.
std::string read_corpus(const std::string& path, std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (ec || !fs::exists(status)) {
    if (path == kFortunesDir)
      throw Error("--data", "fortunes: " + path + " does not exist; install Debian's package "
                            "'fortunes' (apt-get install fortunes; scripts/setup.sh --tests does)");
    throw Error("--data", "text:" + path + ": no such file or directory");
  }
  if (!fs::is_directory(fs::status(path, ec))) {
    std::string bytes = read_text_file(path);
    what = fmt_bytes(bytes.size()) + " of " + path;
    return bytes;
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, ec))
    if (entry.is_regular_file(ec) && !entry.is_symlink(ec)) files.push_back(entry.path());
  if (ec) throw Error(path, "cannot list the directory: " + ec.message());
  std::sort(files.begin(), files.end());
  std::string corpus;
  int used = 0;
  for (const fs::path& file : files) {
    std::string bytes = read_text_file(file);
    if (bytes.find('\0') != std::string::npos) continue;  // binary (fortune's .dat indexes)
    corpus += bytes;
    ++used;
  }
  if (used == 0) throw Error(path, "holds no text files (regular files without NUL bytes)");
  what = fmt_bytes(corpus.size()) + " of " + std::to_string(used) + " text files in " + path;
  return corpus;
}

}  // namespace

bool is_text_dataset(std::string_view spec) {
  return spec == "fortunes" || spec.substr(0, kTextPrefix.size()) == kTextPrefix;
}

Dataset load_text_dataset(std::string_view spec, Split split, int64_t context) {
  const std::string path =
      spec == "fortunes" ? std::string(kFortunesDir) : std::string(spec.substr(kTextPrefix.size()));
  if (path.empty()) throw Error("--data", "text: needs a path (text:FILE or text:DIR)");
  if (context < 1)
    throw Error("--data", std::string(spec) + ": the model's input must be token ids [batch, "
                                              "sequence] to train on text");
  std::string what;
  const std::string corpus = read_corpus(path, what);
  const auto length = static_cast<int64_t>(corpus.size());
  const int64_t windows = length > 0 ? (length - 1) / context : 0;
  if (windows < kTestEvery)
    throw Error("--data", std::string(spec) + ": " + what + " make " + std::to_string(windows) +
                              " windows of " + std::to_string(context + 1) +
                              " bytes; at least " + std::to_string(kTestEvery) +
                              " are needed (one in ten is the test split)");
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < windows; ++i)
    if ((i % kTestEvery == kTestEvery - 1) == (split == Split::Test)) picked.push_back(i);
  const auto count = static_cast<int64_t>(picked.size());
  Dataset dataset;
  dataset.images = ir::Tensor({ir::DType::I32, {count, context}});
  dataset.labels = ir::Tensor({ir::DType::I32, {count, context}});
  auto* tokens = reinterpret_cast<int32_t*>(dataset.images.data());
  auto* labels = reinterpret_cast<int32_t*>(dataset.labels.data());
  for (int64_t s = 0; s < count; ++s) {
    const auto* window = reinterpret_cast<const unsigned char*>(corpus.data()) + picked[s] * context;
    for (int64_t t = 0; t < context; ++t) {
      tokens[s * context + t] = window[t];
      labels[s * context + t] = window[t + 1];
    }
  }
  dataset.source = std::string(spec) + " (" + what + ") " + split_name(split);
  return dataset;
}

}  // namespace kiln::data
