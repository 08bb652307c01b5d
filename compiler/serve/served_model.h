// One model as `kiln serve` runs it: compiled once (through the package cache), loaded into
// `instances` executables, and fed by a dynamic batcher.
//
// Dynamic batching (as Triton's dynamic batcher): a model whose inputs and outputs all lead with
// the same bounded dynamic dim (ir/dynamic_dims.h; "batch<=8") is batchable. Requests wait in
// one queue; an idle instance takes the oldest, then every later request whose other dims match,
// while the rows fit in max_batch, waiting up to max_queue_delay for more when the batch is not
// full. The inputs are concatenated along dim 0, the model runs once, and each request gets its
// rows of the outputs back. Rows never mix: the dynamic-dim analysis proved that no op lets one
// row reach another, so a request's answer does not depend on what it was batched with.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compiler/package_builder.h"
#include "compiler/serve/infer_protocol.h"
#include "compiler/serve/metrics.h"
#include "runtime/executor/executable.h"

namespace kiln::serve {

struct ModelConfig {
  int64_t max_batch = 8;             // rows per run; 1 turns batching off
  double max_queue_delay_ms = 2;     // how long a partial batch waits for more requests
  int instances = 1;                 // executables running batches concurrently
  double queue_timeout_ms = 30'000;  // a request still queued after this gets 503
};

class ServedModel {
 public:
  // Compiles (or finds in the package cache) the model `request.model`, or reads the package,
  // and creates the instances on `backend`. Throws kiln::Error.
  static std::unique_ptr<ServedModel> load(const std::string& name, compiler::PackageRequest request,
                                           const runtime::ExecutableOptions& backend,
                                           const ModelConfig& config, Metrics& metrics);
  ~ServedModel();  // stop()

  const ModelSignature& signature() const { return signature_; }
  const std::string& version() const { return version_; }
  const std::string& backend() const { return backend_name_; }
  const ModelConfig& config() const { return config_; }
  // Rows per run: config().max_batch within the model's bound, 1 when not batchable.
  int64_t max_batch() const { return max_batch_; }
  // Why requests are not batched ("" when they are).
  const std::string& unbatched_reason() const { return unbatched_reason_; }

  // Queues a parsed request and waits for its outputs (the model's order). Throws
  // RequestError(503) when the model is stopping or the request timed out in the queue, and
  // kiln::Error when the run fails.
  std::vector<ir::Tensor> infer(std::vector<ir::Tensor> inputs);

  // Finishes every queued request, then ends the workers. New requests get 503.
  void stop();

 private:
  struct Pending {
    std::vector<ir::Tensor> inputs;
    int64_t rows = 1;
    std::chrono::steady_clock::time_point arrived;
    std::promise<std::vector<ir::Tensor>> result;
  };
  using PendingList = std::vector<std::shared_ptr<Pending>>;

  ServedModel(std::string name, const ModelConfig& config, Metrics& metrics);
  void work(runtime::Executable& executable);
  PendingList take_batch(std::unique_lock<std::mutex>& lock);  // with mutex_ held
  bool can_join(const Pending& first, const Pending& other, int64_t rows) const;
  void run_batch(runtime::Executable& executable, PendingList& batch);

  std::string name_, version_ = "1", backend_name_;
  ModelSignature signature_;
  ModelConfig config_;
  Metrics& metrics_;
  int64_t max_batch_ = 1;
  std::string unbatched_reason_;

  std::vector<std::unique_ptr<runtime::Executable>> instances_;
  std::vector<std::thread> workers_;
  std::mutex join_mutex_;  // held while joining workers_
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  bool forming_ = false;  // an instance is forming a batch from the queue
};

}  // namespace kiln::serve
