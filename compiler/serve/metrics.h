// What `kiln serve` counts, per model, and its /metrics page in Prometheus' text exposition
// format (version 0.0.4): counters of requests, failures and runs, and histograms of request
// latency, time in the batching queue and batch size. Thread-safe: every update takes the lock.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

// Cumulative buckets, as Prometheus histograms count them: bucket i holds observations <= its bound.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The "_bucket", "_sum" and "_count" lines of metric `name` with label text `labels` (model="mlp").
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  // A request answered for `model` (status 200 or not), with its latency in seconds.
  void request(const std::string& model, bool success, double seconds);
  // One run of `model` on a batch of `requests` requests holding `samples` rows, after the
  // oldest of them waited `queue_seconds` in the queue.
  void run(const std::string& model, int64_t requests, int64_t samples, double queue_seconds);
  // The whole page.
  std::string render() const;

 private:
  struct PerModel {
    uint64_t requests = 0, failures = 0, runs = 0, samples = 0;
    Histogram latency, queue, batch_requests;
    PerModel();
  };
  PerModel& model(const std::string& name);  // with mutex_ held
  mutable std::mutex mutex_;
  std::map<std::string, PerModel> models_;
};

}  // namespace kiln::serve
