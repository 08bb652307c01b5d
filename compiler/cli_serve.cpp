// `kiln serve MODEL_OR_REPOSITORY`: compiled models over HTTP with the Open Inference Protocol
// (compiler/serve/, docs/deploy.md).
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iostream>

#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/model_loader.h"
#include "compiler/pipeline_flags.h"
#include "compiler/serve/http_server.h"
#include "compiler/serve/model_repository.h"
#include "ir/diagnostic.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/host/host_module.h"

namespace kiln::cli {

namespace serve_command {

struct Options {
  std::string root;
  std::string backend = "auto";
  serve::HttpOptions http;
  serve::ModelConfig model;
  double max_body_mb = 64;
  CacheFlags cache;
  LibraryFlag library;
  PrecisionFlag precision;
  PipelineFlags pipeline;
  InputShapeFlag input_shapes;
  std::vector<std::string> archs = {"sm_80", "sm_90"};
};

// "x f32[batch<=8,784]" per input.
std::string describe(const std::vector<serve::TensorSpec>& specs) {
  std::string text;
  for (const serve::TensorSpec& spec : specs) {
    std::vector<std::string> dims;
    for (size_t d = 0; d < spec.shape.size(); ++d)
      dims.push_back(spec.dynamic[d] ? fmt::format("<={}", spec.shape[d]) : std::to_string(spec.shape[d]));
    text += fmt::format("{}{} {}[{}]", text.empty() ? "" : ", ", spec.name, ir::dtype_name(spec.dtype),
                        fmt::join(dims, ","));
  }
  return text;
}

int run(Options options) {
  // Before any thread exists, so that the stop signals reach only serve's watcher.
  serve::block_stop_signals();
  std::error_code ec;
  if (!std::filesystem::exists(options.root, ec))
    throw Error(options.root, "no such model file or repository directory");
  const bool single_file = !std::filesystem::is_directory(options.root, ec);
  if (!single_file && (!options.input_shapes.specs.empty() || !options.input_shapes.dim_specs.empty()))
    throw Error("--dim/--input-shape", "apply to one model file; in a repository, give them in the model's "
                                       "config.json (\"dims\", \"input_shapes\")");

  serve::ServeDefaults defaults;
  const std::string backend = options.backend == "auto" ? runtime::cuda::auto_backend(false, std::cerr) : options.backend;
  if (backend == "cuda") {
    std::string why;
    if (!runtime::cuda::cuda_available(&why))
      throw Error("--backend=cuda", why + "; use --backend=host to serve the same kernels from the CPU");
    defaults.request.archs = options.archs;
  } else {
    defaults.request.archs.clear();  // the host backend compiles the source itself: no NVRTC
    defaults.request.ptx = false;
  }
  defaults.request.library = options.library.text;
  defaults.request.precision = options.precision.value();
  options.pipeline.apply_to(defaults.request, options.library.selection(), options.precision.value());
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  defaults.request.cache = cache.get();
  defaults.request.verbose = options.cache.verbose;
  defaults.backend.backend = backend == "cuda" ? runtime::Backend::Cuda : runtime::Backend::Host;
  defaults.backend.cache = cache.get();
  defaults.backend.host = runtime::host::host_options_from_environment();
  defaults.backend.cuda.libraries = options.library.selection();
  defaults.config = options.model;
  // --dim, --input-shape: only for an ONNX or Keras file (an error names the flag otherwise).
  if (single_file) defaults.import = options.input_shapes.options(options.root);
  options.http.max_body_bytes = static_cast<size_t>(options.max_body_mb * (1 << 20));

  serve::Metrics metrics;
  serve::ModelRepository repository(options.root, defaults, metrics);
  const std::vector<serve::RepositoryEntry> entries = repository.scan();
  if (entries.empty()) throw Error(options.root, "the repository holds no models (docs/deploy.md: its layout)");
  for (const serve::RepositoryEntry& entry : entries) {
    if (serve::stop_requested()) break;
    std::cerr << fmt::format("kiln serve: loading '{}' ({})\n", entry.name, entry.model.empty() ? entry.config : entry.model);
    repository.load(entry.name);
    const std::shared_ptr<serve::ServedModel> model = repository.find(entry.name);
    std::cerr << fmt::format("kiln serve: '{}' ready on the {} backend: inputs {}; outputs {}\n", entry.name,
                             model->backend(), describe(model->signature().inputs), describe(model->signature().outputs));
    std::cerr << (model->max_batch() > 1
                      ? fmt::format("kiln serve: '{}' batches up to {} rows within {} ms, {} instance(s)\n", entry.name,
                                    model->max_batch(), model->config().max_queue_delay_ms, model->config().instances)
                      : fmt::format("kiln serve: '{}' runs each request alone ({}), {} instance(s)\n", entry.name,
                                    model->unbatched_reason(), model->config().instances));
  }
  serve::serve(repository, metrics, options.http, [&](int port) {
    std::printf("kiln serve: listening on http://%s:%d\n", options.http.host.c_str(), port);
    std::fflush(stdout);
  });
  std::cerr << "kiln serve: stopped\n";
  return kExitOk;
}

}  // namespace serve_command

Command add_serve_command(CLI::App& app) {
  using namespace serve_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve models over HTTP (KServe v2 / Open Inference Protocol) with dynamic batching");
  cmd->footer("Endpoints, repository layout and client examples: docs/deploy.md. SIGTERM or Ctrl-C drains "
              "the requests in flight and exits 0.");
  cmd->add_option("MODEL_OR_REPOSITORY", options->root,
                  "a model file (.json, .onnx, Keras), a package from kiln compile, or a directory of "
                  "models (docs/deploy.md)")
      ->required();
  cmd->add_option("--host", options->http.host, "the address to listen on")->capture_default_str();
  cmd->add_option("--port", options->http.port, "the TCP port; 0 picks a free one (printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--backend", options->backend,
                  "auto: cuda when a GPU is available, else host; host: the generated CUDA kernels on the CPU")
      ->check(CLI::IsMember({"auto", "host", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--max-batch", options->model.max_batch,
                  "rows merged into one run (1: no batching); a model batches when its inputs and outputs "
                  "lead with one dynamic dim, up to its bound")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--max-queue-delay-ms", options->model.max_queue_delay_ms,
                  "how long a partial batch waits for more requests")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--instances", options->model.instances, "executables per model running batches concurrently")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--queue-timeout-ms", options->model.queue_timeout_ms,
                  "a request still queued after this is answered 503")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--max-body-mb", options->max_body_mb, "larger request bodies are answered 413")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--read-timeout-s", options->http.read_timeout_s,
                  "a client that sends nothing for this long mid-request is disconnected")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->add_option("--http-threads", options->http.threads, "connections served at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--access-log", options->http.access_log,
                  "one JSON line per request: a file (appended), - for stderr, or '' for none")
      ->capture_default_str();
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->precision.add_to(*cmd);
  options->pipeline.add_to(*cmd, 1);
  options->input_shapes.add_to(*cmd);
  add_arch_option(*cmd, options->archs);
  return {cmd, [options]() { return run(*options); }};
}

}  // namespace kiln::cli
