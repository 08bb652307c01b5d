#include "compiler/serve/served_model.h"

#include <cstring>
#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "ir/dynamic_dims.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/package/package.h"

namespace kiln::serve {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TensorSpec spec_of(const std::string& name, const codegen::Buffer& buffer, const ir::DimMap& dims) {
  TensorSpec spec{name, buffer.type.dtype, buffer.type.shape, std::vector<bool>(buffer.type.shape.size(), false)};
  for (size_t d = 0; d < dims.size() && d < spec.dynamic.size(); ++d) spec.dynamic[d] = dims[d].is_dynamic();
  return spec;
}

// The symbol every input and output leads with, plainly (not inside a reshaped dim) and nowhere
// else, or the reason there is none.
int batch_symbol(const codegen::Program& program, std::string& why_not) {
  std::vector<const ir::DimMap*> all;
  for (const ir::DimMap& dims : program.input_dims) all.push_back(&dims);
  for (const ir::DimMap& dims : program.output_dims) all.push_back(&dims);
  const size_t inputs = program.buffer_ids(codegen::BufferRole::Input).size();
  if (inputs == 0 || program.input_dims.size() != inputs || program.output_dims.size() != program.outputs.size()) {
    why_not = "the model has no dynamic dims (declare one, e.g. \"dims\": {\"batch\": 8}, or --dim batch=8 for ONNX/Keras)";
    return -1;
  }
  int symbol = -1;
  for (const ir::DimMap* dims : all) {
    const bool leads = !dims->empty() && (*dims)[0].is_dynamic() && (*dims)[0].outer == 1 && (*dims)[0].inner == 1;
    if (!leads || (symbol >= 0 && (*dims)[0].symbol != symbol)) {
      why_not = "not every input and output leads with the same dynamic dim";
      return -1;
    }
    symbol = (*dims)[0].symbol;
    for (size_t d = 1; d < dims->size(); ++d)
      if ((*dims)[d].symbol == symbol) {
        why_not = fmt::format("the dynamic dim '{}' appears past dim 0", program.symbols[static_cast<size_t>(symbol)].name);
        return -1;
      }
  }
  return symbol;
}

// `tensors` (each [rows_i, rest...]) stacked along dim 0.
ir::Tensor concatenate(const std::vector<const ir::Tensor*>& tensors) {
  ir::TensorType type = tensors.front()->type();
  type.shape[0] = 0;
  for (const ir::Tensor* tensor : tensors) type.shape[0] += tensor->shape()[0];
  ir::Tensor joined(type);
  std::byte* out = joined.data();
  for (const ir::Tensor* tensor : tensors) {
    if (tensor->byte_size() > 0) std::memcpy(out, tensor->data(), tensor->byte_size());
    out += tensor->byte_size();
  }
  return joined;
}

// Rows [first, first + count) of `tensor` along dim 0.
ir::Tensor rows(const ir::Tensor& tensor, int64_t first, int64_t count) {
  ir::TensorType type = tensor.type();
  const size_t row_bytes = tensor.shape()[0] == 0 ? 0 : tensor.byte_size() / static_cast<size_t>(tensor.shape()[0]);
  type.shape[0] = count;
  ir::Tensor slice(type);
  if (slice.byte_size() > 0)
    std::memcpy(slice.data(), tensor.data() + static_cast<size_t>(first) * row_bytes, slice.byte_size());
  return slice;
}

}  // namespace

ServedModel::ServedModel(std::string name, const ModelConfig& config, Metrics& metrics)
    : name_(std::move(name)), config_(config), metrics_(metrics) {}

std::unique_ptr<ServedModel> ServedModel::load(const std::string& name, compiler::PackageRequest request,
                                               const runtime::ExecutableOptions& backend,
                                               const ModelConfig& config, Metrics& metrics) {
  std::unique_ptr<ServedModel> model(new ServedModel(name, config, metrics));
  const runtime::Package package = runtime::is_package_file(request.model)
                                       ? runtime::read_package(request.model)
                                       : compiler::build_package(request).package;
  const runtime::PackageProgram* program = package.find(runtime::kInferenceProgram);
  if (!program) throw Error(request.model, "the package has no inference program");
  const codegen::Program& code = program->program;

  model->signature_.name = name;
  const std::vector<int> input_ids = code.buffer_ids(codegen::BufferRole::Input);
  for (size_t i = 0; i < input_ids.size(); ++i) {
    const codegen::Buffer& buffer = code.buffers[static_cast<size_t>(input_ids[i])];
    model->signature_.inputs.push_back(
        spec_of(buffer.name, buffer, i < code.input_dims.size() ? code.input_dims[i] : ir::DimMap{}));
  }
  for (size_t i = 0; i < code.outputs.size(); ++i)
    model->signature_.outputs.push_back(spec_of(code.output_names.at(i), code.buffers[static_cast<size_t>(code.outputs[i])],
                                                i < code.output_dims.size() ? code.output_dims[i] : ir::DimMap{}));

  const int symbol = batch_symbol(code, model->unbatched_reason_);
  if (symbol >= 0 && config.max_batch > 1) {
    model->max_batch_ = std::min(config.max_batch, code.symbols[static_cast<size_t>(symbol)].bound);
  } else if (symbol >= 0) {
    model->unbatched_reason_ = "--max-batch is 1";
  }

  model->backend_name_ = backend.backend == runtime::Backend::Cuda ? "cuda" : "host";
  if (backend.backend == runtime::Backend::Cuda)
    runtime::require_code_for(program->binary, runtime::cuda::cuda_device_info(0).sm, request.model);
  const std::vector<ir::Tensor> parameters = package.parameters(code, request.model);
  for (int i = 0; i < std::max(config.instances, 1); ++i)
    model->instances_.push_back(runtime::Executable::create(code, parameters, backend, &program->binary));
  for (auto& instance : model->instances_)
    model->workers_.emplace_back([m = model.get(), e = instance.get()] { m->work(*e); });
  return model;
}

ServedModel::~ServedModel() { stop(); }

void ServedModel::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  std::lock_guard joining(join_mutex_);  // an unload and the shutdown may both stop a model
  for (std::thread& worker : workers_)
    if (worker.joinable()) worker.join();
}

std::vector<ir::Tensor> ServedModel::infer(std::vector<ir::Tensor> inputs) {
  auto pending = std::make_shared<Pending>();
  pending->rows = max_batch_ > 1 && !inputs.empty() && !inputs[0].shape().empty() ? inputs[0].shape()[0] : 1;
  pending->inputs = std::move(inputs);
  pending->arrived = Clock::now();
  std::future<std::vector<ir::Tensor>> result = pending->result.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw RequestError(503, "model '" + name_ + "' is shutting down");
    queue_.push_back(pending);
  }
  wake_.notify_all();
  return result.get();
}

bool ServedModel::can_join(const Pending& first, const Pending& other, int64_t rows) const {
  if (rows + other.rows > max_batch_) return false;
  for (size_t i = 0; i < first.inputs.size(); ++i) {
    const ir::Shape& a = first.inputs[i].shape();
    const ir::Shape& b = other.inputs[i].shape();
    if (!std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end())) return false;
  }
  return true;
}

ServedModel::PendingList ServedModel::take_batch(std::unique_lock<std::mutex>& lock) {
  // A partial batch waits for more rows until the oldest request has waited max_queue_delay.
  if (max_batch_ > 1) {
    const auto deadline = queue_.front()->arrived +
                          std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double, std::milli>(config_.max_queue_delay_ms));
    wake_.wait_until(lock, deadline, [&] {
      int64_t rows = 0;
      for (const auto& pending : queue_) rows += pending->rows;
      return stopping_ || rows >= max_batch_;
    });
  }
  PendingList batch{queue_.front()};
  queue_.pop_front();
  int64_t rows = batch.front()->rows;
  for (auto it = queue_.begin(); max_batch_ > 1 && it != queue_.end() && rows < max_batch_;) {
    if (can_join(*batch.front(), **it, rows)) {
      rows += (*it)->rows;
      batch.push_back(*it);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return batch;
}

void ServedModel::work(runtime::Executable& executable) {
  std::unique_lock lock(mutex_);
  while (true) {
    // One instance at a time forms a batch (and waits out its delay); the others wait for the
    // next, so that two idle instances do not split one burst of requests between them.
    wake_.wait(lock, [&] { return (stopping_ && queue_.empty()) || (!queue_.empty() && !forming_); });
    if (queue_.empty()) return;  // stopping, and every request is answered
    forming_ = true;
    PendingList batch = take_batch(lock);
    forming_ = false;
    lock.unlock();
    wake_.notify_all();
    run_batch(executable, batch);
    lock.lock();
  }
}

void ServedModel::run_batch(runtime::Executable& executable, PendingList& batch) {
  // Requests that waited past the timeout are answered 503 and not run.
  const double timeout = config_.queue_timeout_ms / 1000;
  double oldest = 0;
  PendingList live;
  for (auto& pending : batch) {
    const double waited = seconds_since(pending->arrived);
    if (waited > timeout) {
      pending->result.set_exception(std::make_exception_ptr(RequestError(
          503, fmt::format("model '{}': the request waited {:.0f} ms in the queue, past the {:.0f} ms timeout",
                           name_, waited * 1000, config_.queue_timeout_ms))));
      continue;
    }
    oldest = std::max(oldest, waited);
    live.push_back(pending);
  }
  if (live.empty()) return;
  try {
    std::vector<ir::Tensor> inputs;
    int64_t total_rows = 0;
    for (const auto& pending : live) total_rows += pending->rows;
    if (live.size() == 1) {
      inputs = std::move(live.front()->inputs);
    } else {
      for (size_t i = 0; i < live.front()->inputs.size(); ++i) {
        std::vector<const ir::Tensor*> parts;
        for (const auto& pending : live) parts.push_back(&pending->inputs[i]);
        inputs.push_back(concatenate(parts));
      }
    }
    std::vector<ir::Tensor> outputs = executable.run(inputs);
    metrics_.run(name_, static_cast<int64_t>(live.size()), total_rows, oldest);
    if (live.size() == 1) {
      live.front()->result.set_value(std::move(outputs));
      return;
    }
    int64_t first = 0;
    for (auto& pending : live) {
      std::vector<ir::Tensor> mine;
      for (const ir::Tensor& output : outputs) mine.push_back(rows(output, first, pending->rows));
      first += pending->rows;
      pending->result.set_value(std::move(mine));
    }
  } catch (...) {
    // A failed run (a kiln::Error from the backend) fails every request of the batch with it
    // that has no answer yet.
    for (auto& pending : live) {
      try {
        pending->result.set_exception(std::current_exception());
      } catch (const std::future_error&) {
      }
    }
  }
}

}  // namespace kiln::serve
