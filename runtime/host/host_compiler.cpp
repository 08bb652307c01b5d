// The host C++ compiler: g++ run without a shell (posix_spawnp), its output captured to a file.
#include "runtime/host/host_compiler.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/diagnostic.h"
#include "runtime/host/host_module.h"

extern char** environ;

namespace kiln::runtime::host::detail {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxCompilerOutput = 16 * 1024;  // enough for the first errors

#if defined(__x86_64__)
constexpr const char* kTarget = "x86_64";
#elif defined(__aarch64__)
constexpr const char* kTarget = "aarch64";
#else
constexpr const char* kTarget = "unknown";
#endif

// Runs argv with stdout and stderr sent to `log`; returns the exit status (or -1 when the
// program could not be started, with errno's text in *why).
int run_program(const std::vector<std::string>& argv, const std::string& log, std::string* why) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  // The compiler starts with no signal blocked: a caller that blocks SIGINT and SIGTERM to
  // take them on a thread of its own (kiln serve) must not make a Ctrl-C miss the compiler.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    *why = std::strerror(rc);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      *why = std::strerror(errno);
      return -1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  *why = fmt::format("killed by signal {}", WTERMSIG(status));
  return -1;
}

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

HostCompiler probe_compiler() {
  HostCompiler compiler;
  compiler.program = "g++";
  compiler.target = kTarget;
  // No -ffast-math and no contraction: results must match a plain C++ loop bit for bit where
  // the kernel computes in the same order. CUDA code puns types through kiln_smem, which
  // nvcc tolerates, hence -fno-strict-aliasing. -O2 -fpeel-loops: -fpeel-loops fully unrolls
  // the CUDA bodies' constant per-thread loops (a GEMM's 4 x 4 results) so that their arrays
  // live in registers, which made -O3 1.8x faster than -O2 on the seed CNN's training step;
  // -O2 with it runs as fast as -O3, and compiles the GEMMs' host bodies in 60 % of the time
  // (the seed CNN's training programs: 3.9 -> 2.2 s; docs/codegen.md). -fno-math-errno: CUDA's
  // math never sets errno and no kernel reads it, so sqrtf is one instruction (the same IEEE
  // result) rather than a check and a libm call on the path that would set it.
  // clang-format off
  compiler.flags = {"-std=c++17", "-O2", "-fpeel-loops", "-fPIC", "-shared", "-fno-fast-math",
                    "-ffp-contract=off", "-fno-strict-aliasing", "-fno-math-errno"};
  // clang-format on
#if defined(__x86_64__)
  // threadIdx & co. read a thread_local of the dlopen'ed module: TLS descriptors make that a
  // load instead of a __tls_get_addr call (measured: 34 -> 26 ns per thread per barrier).
  // Caveat: glibc before 2.40 (BZ #31372) may clobber vector registers on a descriptor's slow
  // path, taken on a thread's first access to the module's TLS. BlockRunner's constructor
  // makes that first access (kiln_host_tls(), an ordinary call) on every thread that will run
  // kernels, before any kernel code: kernels only ever take the fast path.
  compiler.flags.push_back("-mtls-dialect=gnu2");
  // The widest vectors this CPU has, named explicitly (not -march=native) so that the cache
  // key says what a module needs: the GEMM template's host body vectorizes along its columns
  // (the seed CNN's convs: 2x faster with AVX2 than with SSE2). Results do not change: without
  // fast-math the compiler vectorizes only what keeps each operation and its order.
  // KILN_HOST_ISA names them instead, comma-separated ("avx2,fma"); "sse2" is the baseline.
  if (const char* isa = std::getenv("KILN_HOST_ISA"); isa != nullptr && *isa != '\0') {
    std::string_view rest = isa;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view extension = rest.substr(0, comma);
      if (!extension.empty() && extension != "sse2")
        compiler.flags.push_back("-m" + std::string(extension));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  } else if (__builtin_cpu_supports("avx2")) {
    compiler.flags.push_back("-mavx2");
    // The GEMM template writes its multiply-adds as fma() (what NVRTC emits on the GPU); with
    // -mfma they are one instruction, without it a libm call each.
    if (__builtin_cpu_supports("fma")) compiler.flags.push_back("-mfma");
    // AVX-512 for the GEMMs' multiply (its vectors are written out). With it, vector gathers:
    // g++'s generic tuning never emits them, which leaves a conv's im2col staging (a guarded
    // load per element) scalar; as masked 16-lane gathers it stages 2.5x faster here, the
    // seed CNN's input-gradient GEMM 30 % faster (docs/codegen.md). Same loads, same values.
    if (__builtin_cpu_supports("avx512f")) {
      compiler.flags.push_back("-mavx512f");
      compiler.flags.push_back("-mtune-ctrl=use_gather");
    }
  }
#endif
  compiler.flags.insert(compiler.flags.end(), {"-x", "c++"});
  TempDir dir;
  const std::string log = dir.path() + "/version.txt";
  std::string why;
  const int status = run_program({compiler.program, "-dumpfullversion"}, log, &why);
  if (status != 0)
    throw Error("host backend",
                fmt::format("cannot run the host compiler '{}': {}", compiler.program,
                            status < 0 ? why : trim(read_file(log))));
  compiler.version = trim(read_file(log));
  return compiler;
}

}  // namespace

const HostCompiler& host_compiler() {
  static const HostCompiler compiler = probe_compiler();
  return compiler;
}

bool TempDir::keep_requested() {
  const char* keep = std::getenv("KILN_HOST_KEEP_TEMPS");
  return keep != nullptr && *keep != '\0' && std::string_view(keep) != "0";
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "kiln-host-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr)
    throw Error("host backend", fmt::format("cannot create a temporary directory {}: {}", pattern,
                                            std::strerror(errno)));
  path_ = pattern;
}

TempDir::~TempDir() {
  if (path_.empty() || keep_requested()) return;
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error(path, "cannot write file");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot read file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string compile_shared_object(const std::string& source, const std::string& stem,
                                  const std::string& dir, const std::string& location) {
  const HostCompiler& compiler = host_compiler();
  const std::string source_path = dir + "/" + stem + ".cu";
  const std::string partial = dir + "/" + stem + ".so.partial";
  const std::string output = dir + "/" + stem + ".so";
  const std::string log = dir + "/" + stem + ".log";
  write_file(source_path, source);
  write_file(dir + "/kiln_host_prelude.h", host_prelude());

  std::vector<std::string> argv = {compiler.program};
  argv.insert(argv.end(), compiler.flags.begin(), compiler.flags.end());
  argv.insert(argv.end(), {"-I", dir, source_path, "-o", partial});
  std::string why;
  const int status = run_program(argv, log, &why);
  if (status != 0) {
    std::string text = status < 0 ? why : read_file(log);
    if (text.size() > kMaxCompilerOutput)
      text = text.substr(0, kMaxCompilerOutput) + "\n[... compiler output truncated]";
    Diagnostic diagnostic{location,
                          fmt::format("the host compiler ({}) failed (exit status {}):\n{}",
                                      compiler.describe(), status, trim(text)),
                          {}};
    diagnostic.notes.push_back(TempDir::keep_requested()
                                   ? "the source is kept in " + source_path
                                   : "set KILN_HOST_KEEP_TEMPS=1 to keep the source");
    throw Error(std::move(diagnostic));
  }
  std::error_code ec;
  fs::rename(partial, output, ec);
  if (ec) throw Error(output, "cannot rename the compiled shared object: " + ec.message());
  return output;
}

}  // namespace kiln::runtime::host::detail
