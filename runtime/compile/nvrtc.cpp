// NVRTC: the CUDA translation unit → PTX and one cubin per arch, through the kernel cache.
//
// One NVRTC compile per arch, for the real arch (--gpu-architecture=sm_XX): that yields the
// cubin and the ptxas report, and NVRTC keeps the intermediate PTX, whose `.target sm_XX` for
// the lowest arch is exactly the PTX a compute_XX compile gives (same text, checked with
// NVRTC 13.0). So the forward-compatible PTX costs no extra compile.
//
// Cache entries per arch: "cubin" and "resources" (the NVRTC log, which holds the ptxas report)
// with target sm_XX, and "ptx" with target compute_XX for the lowest arch. An arch is compiled
// when any of its entries misses; an arch added later reuses the others' entries.
//
// NVRTC reference: https://docs.nvidia.com/cuda/nvrtc/ (nvrtcCompileProgram, nvrtcGetCUBIN).
#include "runtime/compile/nvrtc.h"

#include <nvrtc.h>

#include <algorithm>
#include <future>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace kiln::runtime {

namespace {

// Changes whenever what this file stores under a key changes (e.g. the resources payload).
constexpr const char* kNvrtcEntryFormat = "kiln-nvrtc-1";

void check(nvrtcResult result, const char* call, const std::string& program_name) {
  if (result == NVRTC_SUCCESS) return;
  throw Error(program_name, fmt::format("{} failed: {}", call, nvrtcGetErrorString(result)));
}

// Owns an nvrtcProgram so that every exit path destroys it.
class NvrtcProgram {
 public:
  NvrtcProgram(const std::string& source, const std::string& name) : name_(name) {
    check(nvrtcCreateProgram(&program_, source.c_str(), name.c_str(), 0, nullptr, nullptr),
          "nvrtcCreateProgram", name_);
  }
  ~NvrtcProgram() { nvrtcDestroyProgram(&program_); }
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;

  nvrtcProgram get() const { return program_; }

  std::string log() const {
    size_t size = 0;
    check(nvrtcGetProgramLogSize(program_, &size), "nvrtcGetProgramLogSize", name_);
    std::string text(size, '\0');
    check(nvrtcGetProgramLog(program_, text.data()), "nvrtcGetProgramLog", name_);
    while (!text.empty() && text.back() == '\0') text.pop_back();
    return text;
  }
  std::string ptx() const {
    size_t size = 0;
    check(nvrtcGetPTXSize(program_, &size), "nvrtcGetPTXSize", name_);
    std::string text(size, '\0');
    check(nvrtcGetPTX(program_, text.data()), "nvrtcGetPTX", name_);
    while (!text.empty() && text.back() == '\0') text.pop_back();  // the size counts the NUL
    return text;
  }
  std::string cubin() const {
    size_t size = 0;
    check(nvrtcGetCUBINSize(program_, &size), "nvrtcGetCUBINSize", name_);
    std::string bytes(size, '\0');
    check(nvrtcGetCUBIN(program_, bytes.data()), "nvrtcGetCUBIN", name_);
    return bytes;
  }

 private:
  nvrtcProgram program_ = nullptr;
  std::string name_;
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return "";
  const size_t end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The kernel name in `text` (starting at `__global__`): the first identifier followed by '(',
// stepping over `__launch_bounds__(...)`.
std::string kernel_name_after_global(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    if (!is_identifier_char(text[i])) {
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < text.size() && is_identifier_char(text[i])) ++i;
    const std::string word = text.substr(begin, i - begin);
    size_t next = text.find_first_not_of(" \t\n", i);
    if (next == std::string::npos || text[next] != '(') continue;
    if (word != "__launch_bounds__") return word;
    const size_t close = text.find(')', next);
    if (close == std::string::npos) return "";
    i = close + 1;
  }
  return "";
}

// The kernel whose body holds 1-based `line_number`: the nearest `__global__` above it whose
// braces have not closed again before that line. Generated kernels keep device helpers outside
// kernel bodies, so a line in a helper belongs to no kernel.
std::optional<std::string> enclosing_kernel(const std::vector<std::string>& lines,
                                            int line_number) {
  const int last = std::min<int>(line_number, int(lines.size()));
  int start = -1;
  for (int i = last - 1; i >= 0; --i) {
    const std::string stripped = trim(lines[i]);
    if (stripped.rfind("//", 0) == 0) continue;
    if (stripped.find("__global__") != std::string::npos) {
      start = i;
      break;
    }
  }
  if (start < 0) return std::nullopt;
  int depth = 0;
  bool opened = false;
  for (int i = start; i < last - 1; ++i) {
    const std::string& line = lines[i];
    for (size_t c = 0; c < line.size(); ++c) {
      if (line[c] == '/' && c + 1 < line.size() && line[c + 1] == '/') break;
      if (line[c] == '{') {
        ++depth;
        opened = true;
      } else if (line[c] == '}') {
        --depth;
      }
    }
    if (opened && depth <= 0) return std::nullopt;  // the kernel ended above the error
  }
  std::string signature;
  for (int i = start; i < std::min<int>(start + 4, int(lines.size())); ++i)
    signature += lines[i] + "\n";
  signature = signature.substr(signature.find("__global__"));
  const std::string name = kernel_name_after_global(signature);
  if (name.empty()) return std::nullopt;
  return name;
}

// The NVRTC log with "  in kernel 'k', source line: ..." under each error about `program_name`.
std::string annotate_log(const std::string& log, const std::string& source,
                         const std::string& program_name) {
  static const std::regex error_line(R"(^(.*)\((\d+)\): (catastrophic )?error)");
  const std::vector<std::string> source_lines = split_lines(source);
  std::string out;
  for (const std::string& line : split_lines(log)) {
    out += line + "\n";
    std::smatch match;
    if (!std::regex_search(line, match, error_line) || match[1].str() != program_name) continue;
    const int line_number = std::stoi(match[2].str());
    const std::string text = line_number >= 1 && line_number <= int(source_lines.size())
                                 ? trim(source_lines[line_number - 1])
                                 : std::string("<outside the source>");
    if (std::optional<std::string> kernel = enclosing_kernel(source_lines, line_number))
      out += fmt::format("  in kernel '{}', source line: {}\n", *kernel, text);
    else
      out += fmt::format("  outside any kernel, source line: {}\n", text);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// "sm_90" → 90; anything else is a user error (the archs come from --arch).
int arch_number(const std::string& arch, const std::string& program_name) {
  static const std::regex pattern(R"(sm_(\d+)[a-z]?)");
  std::smatch match;
  if (!std::regex_match(arch, match, pattern))
    throw Error(program_name, fmt::format("unknown GPU architecture '{}' (expected sm_80, sm_90, "
                                          "...)", arch));
  return std::stoi(match[1].str());
}

std::vector<std::string> nvrtc_flags(const NvrtcOptions& options) {
  std::vector<std::string> flags = {
      "-std=c++17",
      "--ptxas-options=-v",  // the resource report parse_ptxas_report reads
      "-lineinfo",           // profilers and compute-sanitizer map SASS back to source lines
      "-default-device",     // helpers without __device__ still compile for the GPU
  };
  flags.insert(flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  return flags;
}

std::string join(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : " ") + part;
  return text;
}

struct ArchOutput {
  std::string cubin;
  std::string ptx;
  std::string log;
};

ArchOutput compile_arch(const std::string& source, const std::string& program_name,
                        const std::string& arch, const std::vector<std::string>& flags) {
  NvrtcProgram program(source, program_name);
  std::vector<std::string> all = {"--gpu-architecture=" + arch};
  all.insert(all.end(), flags.begin(), flags.end());
  std::vector<const char*> argv;
  for (const std::string& flag : all) argv.push_back(flag.c_str());
  const nvrtcResult result = nvrtcCompileProgram(program.get(), int(argv.size()), argv.data());
  ArchOutput output;
  output.log = program.log();
  if (result == NVRTC_ERROR_COMPILATION || result == NVRTC_ERROR_INVALID_OPTION) {
    throw Error(program_name,
                fmt::format("CUDA compilation for {} failed ({}):\n{}", arch,
                            nvrtcGetErrorString(result),
                            annotate_log(output.log, source, program_name)));
  }
  check(result, "nvrtcCompileProgram", program_name);
  output.cubin = program.cubin();
  output.ptx = program.ptx();
  return output;
}

// Cache access that says why it missed under --verbose.
class CacheSession {
 public:
  CacheSession(const NvrtcOptions& options, std::string source_hash, std::string compiler,
               std::string flags)
      : options_(options),
        source_hash_(std::move(source_hash)),
        compiler_(std::move(compiler)),
        flags_(std::move(flags)) {}

  CacheKey key(const std::string& kind, const std::string& target) const {
    return CacheKey{kind, source_hash_, compiler_, target, flags_, kNvrtcEntryFormat};
  }
  std::optional<std::string> read(const CacheKey& key) const {
    if (!options_.cache) return std::nullopt;
    std::string why;
    std::optional<std::string> bytes = options_.cache->read(key, &why);
    if (!bytes && options_.verbose)
      std::cerr << "kiln: cache miss for " << key.describe() << ": " << why << "\n";
    return bytes;
  }
  void store(const CacheKey& key, const std::string& bytes) const {
    if (options_.cache) options_.cache->store(key, bytes);
  }

 private:
  const NvrtcOptions& options_;
  std::string source_hash_, compiler_, flags_;
};

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion", "nvrtc");
  return fmt::format("nvrtc {}.{}", major, minor);
}

CudaBinary compile_with_nvrtc(const std::string& source, const std::string& program_name,
                              const NvrtcOptions& options) {
  if (options.archs.empty())
    throw Error(program_name, "no GPU architecture to compile for (e.g. --arch=sm_90)");
  std::vector<std::pair<int, std::string>> archs;
  for (const std::string& arch : options.archs)
    archs.emplace_back(arch_number(arch, program_name), arch);
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());

  CudaBinary binary;
  binary.compiler = nvrtc_version();
  binary.ptx_arch = fmt::format("compute_{}", archs.front().first);
  binary.from_cache = true;
  const std::vector<std::string> flags = nvrtc_flags(options);
  const CacheSession cache(options, hash_text(source), binary.compiler, join(flags));

  // What the cache holds per arch; the PTX (for the oldest arch) rides with that arch.
  struct ArchEntry {
    std::string arch;
    bool wants_ptx = false;
    std::optional<std::string> cubin, log, ptx;
    bool cached() const { return cubin && log && ptx; }
  };
  std::vector<ArchEntry> entries;
  for (size_t i = 0; i < archs.size(); ++i) {
    ArchEntry entry;
    entry.arch = archs[i].second;
    entry.wants_ptx = i == 0;
    entry.cubin = cache.read(cache.key("cubin", entry.arch));
    entry.log = cache.read(cache.key("resources", entry.arch));
    entry.ptx = entry.wants_ptx ? cache.read(cache.key("ptx", binary.ptx_arch)) : std::string();
    entries.push_back(std::move(entry));
  }
  // The archs the cache lacks compile concurrently: an NVRTC program is used by one thread
  // only, and compiles are independent (sm_80 and sm_90 of ResNet-50: about half the time on
  // 2 cores). The first failure, in arch order, is the one reported.
  std::vector<std::future<ArchOutput>> compiles(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    if (!entries[i].cached())
      compiles[i] = std::async(std::launch::async, compile_arch, std::cref(source),
                               std::cref(program_name), std::cref(entries[i].arch),
                               std::cref(flags));
  std::vector<ArchOutput> outputs(entries.size());
  std::exception_ptr failure;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!compiles[i].valid()) continue;
    try {
      outputs[i] = compiles[i].get();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);

  for (size_t i = 0; i < entries.size(); ++i) {
    ArchEntry& entry = entries[i];
    if (!entry.cached()) {
      binary.from_cache = false;
      entry.cubin = std::move(outputs[i].cubin);
      entry.log = std::move(outputs[i].log);
      cache.store(cache.key("cubin", entry.arch), *entry.cubin);
      cache.store(cache.key("resources", entry.arch), *entry.log);
      if (entry.wants_ptx) {
        entry.ptx = std::move(outputs[i].ptx);
        cache.store(cache.key("ptx", binary.ptx_arch), *entry.ptx);
      }
    }
    binary.cubins[entry.arch] = std::move(*entry.cubin);
    if (entry.wants_ptx) binary.ptx = std::move(*entry.ptx);
    for (KernelResources& resources : parse_ptxas_report(*entry.log))
      binary.resources.push_back(std::move(resources));
  }
  return binary;
}

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  static const std::regex entry(R"(Compiling entry function '([^']+)' for '([^']+)')");
  static const std::regex properties(R"(Function properties for (\S+))");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex barriers(R"(used (\d+) barriers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex cmem(R"((\d+) bytes cmem\[\d+\])");

  std::vector<KernelResources> kernels;
  // ptxas also lists the functions an entry calls ("Function properties for helper" with their
  // own stack frame) between the entry's properties and its "Used" line: a stack frame line
  // counts only under the entry's own properties; the "Used" line always belongs to the entry.
  bool in_entry = false;
  for (const std::string& line : split_lines(log)) {
    std::smatch match;
    if (std::regex_search(line, match, entry)) {
      kernels.push_back(KernelResources{match[1].str(), match[2].str()});
      in_entry = true;
      continue;
    }
    if (kernels.empty()) continue;
    KernelResources& current = kernels.back();
    if (std::regex_search(line, match, properties)) {
      in_entry = match[1].str() == current.kernel;
      continue;
    }
    if (in_entry && std::regex_search(line, match, frame)) {
      current.stack_frame_bytes = std::stoi(match[1].str());
      current.spill_store_bytes = std::stoi(match[2].str());
      current.spill_load_bytes = std::stoi(match[3].str());
      continue;
    }
    if (!std::regex_search(line, match, used)) continue;
    current.registers = std::stoi(match[1].str());
    if (std::regex_search(line, match, barriers)) current.barriers = std::stoi(match[1].str());
    if (std::regex_search(line, match, smem)) current.static_shared_bytes = std::stoi(match[1].str());
    for (auto it = std::sregex_iterator(line.begin(), line.end(), cmem);
         it != std::sregex_iterator(); ++it)
      current.constant_bytes += std::stoi((*it)[1].str());
  }
  return kernels;
}

}  // namespace kiln::runtime
