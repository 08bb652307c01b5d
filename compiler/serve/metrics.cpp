// Prometheus' text format: https://prometheus.io/docs/instrumenting/exposition_formats/
#include "compiler/serve/metrics.h"

#include <fmt/format.h>

namespace kiln::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? fmt::format("{}", bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
  }
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

namespace {

// Seconds: 0.5 ms to 10 s, roughly three per decade.
std::vector<double> latency_bounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

// A label value with \, " and newlines escaped, as the format requires.
std::string label_value(const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return escaped;
}

}  // namespace

Metrics::PerModel::PerModel()
    : latency(latency_bounds()), queue(latency_bounds()), batch_requests({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

Metrics::PerModel& Metrics::model(const std::string& name) { return models_[name]; }

void Metrics::request(const std::string& model_name, bool success, double seconds) {
  std::lock_guard lock(mutex_);
  PerModel& m = model(model_name);
  ++m.requests;
  if (!success) ++m.failures;
  m.latency.observe(seconds);
}

void Metrics::run(const std::string& model_name, int64_t requests, int64_t samples, double queue_seconds) {
  std::lock_guard lock(mutex_);
  PerModel& m = model(model_name);
  ++m.runs;
  m.samples += static_cast<uint64_t>(samples);
  m.batch_requests.observe(static_cast<double>(requests));
  m.queue.observe(queue_seconds);
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto counter = [&](const char* name, const char* help, uint64_t PerModel::*field) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
    for (const auto& [model, m] : models_)
      out += fmt::format("{}{{model=\"{}\"}} {}\n", name, label_value(model), m.*field);
  };
  counter("kiln_inference_requests_total", "Inference requests answered, successful or not.", &PerModel::requests);
  counter("kiln_inference_failures_total", "Inference requests answered with an error.", &PerModel::failures);
  counter("kiln_inference_runs_total", "Runs of the compiled model (one per batch).", &PerModel::runs);
  counter("kiln_inference_samples_total", "Rows (dim 0 of the inputs) computed by those runs.", &PerModel::samples);
  auto histogram = [&](const char* name, const char* help, Histogram PerModel::*field) {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (const auto& [model, m] : models_) (m.*field).render(out, name, "model=\"" + label_value(model) + "\"");
  };
  histogram("kiln_request_duration_seconds", "Time from a request's arrival to its response.", &PerModel::latency);
  histogram("kiln_queue_duration_seconds", "Time the oldest request of a batch waited before its run.", &PerModel::queue);
  histogram("kiln_batch_requests", "Requests merged into one run.", &PerModel::batch_requests);
  return out;
}

}  // namespace kiln::serve
