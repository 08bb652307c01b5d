#include "runtime/executor/host_executor.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include <cstring>

#include "ir/diagnostic.h"
#include "runtime/distributed/collective_schedule.h"
#include "runtime/distributed/communicator.h"

namespace kiln::runtime::host {

namespace {

void check_type(const ir::TensorView& tensor, const codegen::Buffer& buffer) {
  if (tensor.type != buffer.type)
    throw Error("", std::string(codegen::buffer_role_name(buffer.role)) + " '" + buffer.name +
                        "': expected " + buffer.type.to_string() + ", got " +
                        tensor.type.to_string());
}

void check_count(const std::vector<int>& ids, size_t given, const codegen::Program& program,
                 const char* what) {
  if (given >= ids.size()) return;
  for (size_t i = given; i < ids.size(); ++i)
    if (ids[i] >= 0)
      throw Error("", std::string(what) + " '" + program.buffers[ids[i]].name + "' was not given");
}

}  // namespace

// One 256-byte aligned allocation per unplanned buffer (as cudaMalloc aligns): kernels may use
// float4 access, and distinct allocations let the sanitizer build catch a kernel that writes
// past its buffer.
struct HostExecutable::Storage {
  using Block = std::unique_ptr<std::byte[], void (*)(std::byte*)>;
  static Block allocate(int64_t size) {
    const size_t bytes = (static_cast<size_t>(size) + 255) / 256 * 256;
    return Block(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{256})),
                 [](std::byte* p) { ::operator delete[](p, std::align_val_t{256}); });
  }
  Block arena{nullptr, [](std::byte*) {}};
  std::vector<Block> blocks;
};

// The collective kernels of a data-parallel step (Kernel::collective: all_reduce's mean of a
// gradient bucket, broadcast's copy of the root's tensors), performed across the ranks instead
// of launched. At its kernel the operands are packed into one contiguous buffer (so that the
// planner may reuse their memory at once) and the collective started; the wait, and the
// unpacking into the kernel's results, come right before the first kernel that reads a result
// (or at the end of the step): distributed::CollectiveSchedule says when. In between the
// backward pass goes on, and the communicator progresses the transfer between kernels.
class HostExecutable::Collectives {
 public:
  Collectives(const codegen::Program& program, distributed::Communicator& communicator)
      : schedule_(program), communicator_(communicator) {
    for (const auto& [k, collective] : schedule_.collectives())
      staging_.emplace(k, std::vector<std::byte>(static_cast<size_t>(collective.bytes)));
  }

  // Before kernel `k` runs: completes every collective it reads.
  void before(size_t k, const std::vector<void*>& pointers) {
    for (size_t due : schedule_.due_before(k)) finish(due, pointers);
  }

  // Kernel `k`, a collective: packs its operands and starts it.
  void start(size_t k, const std::vector<void*>& pointers) {
    const Collective& collective = *schedule_.find(k);
    std::vector<std::byte>& staging = staging_.at(k);
    std::byte* cursor = staging.data();
    for (size_t i = 0; i < collective.operands.size(); ++i) {
      std::memcpy(cursor, pointers[collective.operands[i]], static_cast<size_t>(collective.sizes[i]));
      cursor += collective.sizes[i];
    }
    if (collective.what.kind == codegen::Collective::Broadcast) {
      requests_[k] = communicator_.start_broadcast(staging.data(), collective.bytes,
                                                   collective.what.index);
    } else {
      const auto count = collective.bytes / static_cast<int64_t>(ir::dtype_size(collective.dtype));
      requests_[k] = communicator_.start_mean(staging.data(), count, collective.dtype);
    }
    schedule_.started(k);
  }

  void progress() {
    if (schedule_.any_pending()) communicator_.progress();
  }

  // At the end of the step: every collective still outstanding.
  void finish_all(const std::vector<void*>& pointers) {
    for (size_t due : schedule_.due_at_end()) finish(due, pointers);
  }

 private:
  using Collective = distributed::CollectiveSchedule::Collective;

  // Waits for collective `k`, then unpacks it into its results.
  void finish(size_t k, const std::vector<void*>& pointers) {
    communicator_.wait(requests_.at(k));
    requests_.erase(k);
    const Collective& collective = *schedule_.find(k);
    const std::byte* cursor = staging_.at(k).data();
    for (size_t i = 0; i < collective.results.size(); ++i) {
      std::memcpy(pointers[collective.results[i]], cursor, static_cast<size_t>(collective.sizes[i]));
      cursor += collective.sizes[i];
    }
  }

  distributed::CollectiveSchedule schedule_;
  distributed::Communicator& communicator_;
  std::map<size_t, std::vector<std::byte>> staging_;  // per collective kernel
  std::map<size_t, int> requests_;  // collective kernel -> the communicator's request
};

HostExecutable::HostExecutable(const codegen::Program& program, const HostModule& module,
                               const std::vector<ir::Tensor>& parameters, HostOptions options)
    : program_(program), module_(module), options_(std::move(options)),
      storage_(std::make_unique<Storage>()) {
  storage_->arena = Storage::allocate(program.arena_bytes);
  for (const codegen::Buffer& buffer : program.buffers) {
    if (buffer.arena_offset >= 0) {
      KILN_CHECK(buffer.arena_offset + buffer.bytes <= program.arena_bytes)
          << "buffer '" << buffer.name << "' lies outside the activation arena";
      pointers_.push_back(storage_->arena.get() + buffer.arena_offset);
      continue;
    }
    storage_->blocks.push_back(Storage::allocate(buffer.bytes));
    pointers_.push_back(storage_->blocks.back().get());
  }
  skips_padding_ = std::any_of(program.kernels.begin(), program.kernels.end(),
                               [](const codegen::Kernel& k) { return k.dynamic_symbol >= 0; });
  if (options_.communicator != nullptr &&
      std::any_of(program.kernels.begin(), program.kernels.end(),
                  [](const codegen::Kernel& k) { return k.collective.has_value(); }))
    collectives_ = std::make_unique<Collectives>(program, *options_.communicator);
  input_buffers_ = program.buffer_ids(codegen::BufferRole::Input);
  parameter_buffers_ = program.buffer_ids(codegen::BufferRole::Parameter);
  check_count(parameter_buffers_, parameters.size(), program, "parameter");
  for (size_t i = 0; i < parameter_buffers_.size(); ++i)
    if (parameter_buffers_[i] >= 0) set_parameter(static_cast<int>(i), parameters[i]);
}

HostExecutable::~HostExecutable() = default;

std::vector<ir::Tensor> HostExecutable::run(const std::vector<ir::Tensor>& inputs, RunProfile* profile) {
  return codegen::run_with_dynamic_dims(
      program_, inputs, [&](const std::vector<ir::Tensor>& bound, const std::vector<int64_t>& sizes) {
        return run_at_bounds(ir::views_of(bound), sizes, profile);
      });
}

std::vector<ir::Tensor> HostExecutable::run_views(const std::vector<ir::TensorView>& inputs) {
  if (!program_.symbols.empty()) return run(ir::copies_of(inputs));
  return run_at_bounds(inputs, {}, nullptr);
}

std::vector<ir::Tensor> HostExecutable::run_at_bounds(const std::vector<ir::TensorView>& inputs,
                                                      const std::vector<int64_t>& sizes, RunProfile* profile) {
  check_count(input_buffers_, inputs.size(), program_, "input");
  for (size_t i = 0; i < input_buffers_.size() && i < inputs.size(); ++i) {
    const int id = input_buffers_[i];
    if (id < 0) continue;
    check_type(inputs[i], program_.buffers[id]);
    std::memcpy(pointers_[id], inputs[i].data, inputs[i].byte_size());
  }

  poison_skipped_padding(sizes);
  std::vector<void*> args;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point first = Clock::now();
  auto microseconds = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  if (profile) {
    profile->backend = "host";
    profile->device = fmt::format("{} CPU worker(s)", options_.workers > 0 ? options_.workers
                                                                            : std::thread::hardware_concurrency());
    profile->kernels.clear();
  }
  for (size_t k = 0; k < program_.kernels.size(); ++k) {
    const codegen::Kernel& kernel = program_.kernels[k];
    if (collectives_) {
      collectives_->before(k, pointers_);
      if (kernel.collective) {
        collectives_->start(k, pointers_);
        continue;
      }
    }
    args.clear();
    for (int id : kernel.args) args.push_back(pointers_.at(id));
    // A kernel of real rows only takes this run's size of its symbol after the buffers.
    int dim_size = 0;
    if (kernel.dynamic_symbol >= 0) {
      const auto symbol = static_cast<size_t>(kernel.dynamic_symbol);
      dim_size = static_cast<int>(sizes.empty() ? program_.symbols.at(symbol).bound : sizes.at(symbol));
      args.push_back(&dim_size);
    }
    // A host-specific body: thread 0 alone runs it, without barriers.
    const bool host_body = kernel.host_variant && !options_.cuda_variants;
    const Clock::time_point start = Clock::now();
    module_.launch(kernel.function(), args.data(), codegen::launch_grid(kernel, program_.symbols, sizes), kernel.block,
                   kernel.dynamic_shared_bytes, kernel.uses_barriers, options_, host_body);
    if (profile)
      profile->kernels.push_back({static_cast<int>(k), microseconds(start - first),
                                  microseconds(Clock::now() - start)});
    if (collectives_) collectives_->progress();
  }
  if (collectives_) collectives_->finish_all(pointers_);

  std::vector<ir::Tensor> outputs;
  for (int id : program_.outputs) {
    const codegen::Buffer& buffer = program_.buffers.at(id);
    std::vector<std::byte> bytes(static_cast<size_t>(buffer.bytes));
    std::memcpy(bytes.data(), pointers_[id], bytes.size());
    outputs.emplace_back(buffer.type, std::move(bytes));
  }
  // After the outputs are read: an output may be a parameter whose next value comes now.
  for (const codegen::Program::StateUpdate& update : program_.state_updates)
    if (!update.in_place())
      std::memcpy(pointers_[update.parameter], pointers_[update.output],
                  static_cast<size_t>(program_.buffers[update.output].bytes));
  return outputs;
}

void HostExecutable::poison_skipped_padding(const std::vector<int64_t>& sizes) {
  if (!options_.poison_padding) return;
  if (!skips_padding_) return;
  bool below = false;
  for (size_t i = 0; i < sizes.size(); ++i) below = below || sizes[i] < program_.symbols.at(i).bound;
  if (!below) return;
  for (size_t id = 0; id < program_.buffers.size(); ++id) {
    const codegen::Buffer& buffer = program_.buffers[id];
    if (buffer.role == codegen::BufferRole::Intermediate || buffer.role == codegen::BufferRole::Output)
      std::memset(pointers_[id], 0xFF, static_cast<size_t>(buffer.bytes));
  }
}

ir::Tensor HostExecutable::parameter(int index) const {
  const int id = parameter_buffers_.at(index);
  KILN_CHECK(id >= 0) << "parameter " << index << " has no buffer";
  const codegen::Buffer& buffer = program_.buffers[id];
  std::vector<std::byte> bytes(static_cast<size_t>(buffer.bytes));
  std::memcpy(bytes.data(), pointers_[id], bytes.size());
  return ir::Tensor(buffer.type, std::move(bytes));
}

void HostExecutable::set_parameter(int index, const ir::Tensor& value) {
  const int id = parameter_buffers_.at(index);
  KILN_CHECK(id >= 0) << "parameter " << index << " has no buffer";
  check_type(ir::TensorView::of(value), program_.buffers[id]);
  std::memcpy(pointers_[id], value.data(), value.byte_size());
}

std::vector<ir::Tensor> run_program(const codegen::Program& program, const HostModule& module,
                                    const std::vector<ir::Tensor>& inputs,
                                    const std::vector<ir::Tensor>& parameters,
                                    const HostOptions& options) {
  HostExecutable executable(program, module, parameters, options);
  return executable.run(inputs);
}

}  // namespace kiln::runtime::host
