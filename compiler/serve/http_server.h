// `kiln serve`'s HTTP side: the Open Inference Protocol's REST endpoints (KServe v2, as Triton
// serves them) over cpp-httplib (Debian's libcpp-httplib-dev), /metrics, an access log, and a
// drain on SIGTERM or SIGINT: the listening socket closes, requests already received are
// answered, the models finish their queues, and serve() returns.
//
//   GET  /v2                                  server metadata
//   GET  /v2/health/live, /v2/health/ready    liveness, readiness
//   GET  /v2/models/{name}[/versions/1]       model metadata (dynamic dims as -1)
//   GET  /v2/models/{name}[/versions/1]/ready
//   POST /v2/models/{name}[/versions/1]/infer JSON tensors, or the binary tensor data extension
//   POST /v2/repository/index                 the repository's models and their states
//   POST /v2/repository/models/{name}/load, /unload
//   GET  /metrics                             Prometheus text format
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "compiler/serve/model_repository.h"

namespace kiln::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                        // 0: any free port
  int threads = 64;                       // connections served at once (requests wait for batches)
  size_t max_body_bytes = 64ull << 20;    // larger requests get 413
  int read_timeout_s = 30;                // a client that stops sending mid-request is dropped
  int write_timeout_s = 30;
  int keep_alive_timeout_s = 2;           // also bounds how long a drain waits for idle connections
  std::string access_log = "-";           // a file, "-" for stderr, "" for none
};

// Serves `repository` until SIGTERM or SIGINT; `ready` is called with the bound port once the
// server listens. Returns after the drain. Throws kiln::Error when the address cannot be bound.
// The caller blocks SIGTERM and SIGINT in every thread first (block_stop_signals), so that
// only serve's watcher receives them.
void serve(ModelRepository& repository, Metrics& metrics, const HttpOptions& options,
           const std::function<void(int port)>& ready);

// Blocks SIGTERM and SIGINT in the calling thread and the threads it starts afterwards, and
// starts the watcher that notes them; a second signal ends the process at once (exit 130).
void block_stop_signals();
// Whether a stop signal has arrived (during the model loads, before serve()).
bool stop_requested();

}  // namespace kiln::serve
