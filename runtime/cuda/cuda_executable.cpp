// The CUDA backend: a Program run through the driver API.
//
// At create(): the device's primary context (shared with any CUDA runtime code in the
// process), one module (the exact cubin, else the PTX, JIT-compiled by the driver), one
// non-blocking stream, and one device allocation (the arena) holding every buffer at a fixed
// offset (plan.h), with the parameters uploaded once. A run copies the inputs into their
// buffers, launches the kernels in order on the stream and copies the outputs back, both
// through pinned staging memory in two slots (pinned_staging.h): submit() returns once the run
// is enqueued, so the caller prepares the next inputs while it runs, and collect() waits for
// the oldest. Because
// no address ever changes, the launch sequence can be captured into a CUDA graph on the first
// run and replayed on every later one (CUDA programming guide, "CUDA Graphs").
//
// Kernels the kernel table marks as library calls (--library) run through cuBLASLt or cuDNN
// when the library loads and accepts the problem (library_runner.h), on the same stream and
// so inside the same graph, with their workspace in the arena; otherwise, and always on the
// host backend, the generated kernel for the same node runs.
#include "runtime/cuda/cuda_executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>

#include "ir/diagnostic.h"
#include "ir/memory_plan.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/library_runner.h"
#include "runtime/cuda/nccl_api.h"
#include "runtime/cuda/pinned_staging.h"
#include "runtime/cuda/plan.h"

namespace kiln::runtime::cuda {
namespace {

// Dynamic shared memory a kernel gets without opting in; above it the kernel must raise
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first (the same on every arch since Volta).
constexpr uint32_t kDefaultDynamicSharedBytes = 48 * 1024;
// Room for the driver's JIT error log; PTX errors are a few lines each.
constexpr size_t kJitLogBytes = 16 * 1024;

CUdevice open_device(const DriverApi& api, int ordinal) {
  int count = 0;
  api.check(api.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    throw backend_unavailable(fmt::format("there is no CUDA device {} ({} found)", ordinal, count));
  }
  CUdevice device = 0;
  api.check(api.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  return device;
}

int device_attribute(const DriverApi& api, CUdevice device, CUdevice_attribute attribute,
                     std::string_view what) {
  int value = 0;
  api.check(api.cuDeviceGetAttribute(&value, attribute, device), "cuDeviceGetAttribute", what);
  return value;
}

CudaDeviceInfo query_device(const DriverApi& api, CUdevice device) {
  // Zero-filled and one byte longer than we tell the driver, so the name always ends.
  char name[257] = {};
  api.check(api.cuDeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName");
  int major = device_attribute(api, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                               "compute capability major");
  int minor = device_attribute(api, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                               "compute capability minor");
  return CudaDeviceInfo{name, sm_number(major, minor)};
}

std::string kernel_launch_context(const codegen::Kernel& kernel) {
  return fmt::format("kernel '{}' (grid [{},{},{}], block [{},{},{}], {} B dynamic shared memory)",
                     kernel.name, kernel.grid.x, kernel.grid.y, kernel.grid.z, kernel.block.x,
                     kernel.block.y, kernel.block.z, kernel.dynamic_shared_bytes);
}

// Loads a cubin or PTX image into the current context; a failure carries the JIT log.
Owned<CUmodule> load_module(const DriverApi& api, const void* image, const std::string& what,
                            const CudaBinary& binary) {
  std::string log(kJitLogBytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  // The size option is an unsigned int passed in the pointer itself, as cuda.h specifies.
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size()))};
  CUmodule module = nullptr;
  CUresult result = api.cuModuleLoadDataEx(&module, image, 2, options, values);
  if (result == CUDA_SUCCESS) return Owned<CUmodule>(module, api.cuModuleUnload);

  Diagnostic diagnostic{"", "CUDA backend: " + api.describe(result, "cuModuleLoadData", what), {}};
  log.resize(strnlen(log.c_str(), log.size()));
  if (!log.empty()) diagnostic.notes.push_back("JIT log:\n" + log);
  if (result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || result == CUDA_ERROR_NO_BINARY_FOR_GPU ||
      result == CUDA_ERROR_INVALID_IMAGE) {
    // Code from a newer toolkit than the driver is the usual cause; say both versions.
    diagnostic.notes.push_back(fmt::format(
        "the driver supports CUDA {}.{}; the code was compiled by {}: a newer driver may be "
        "needed",
        api.driver_version() / 1000, api.driver_version() % 1000 / 10,
        binary.compiler.empty() ? "an unknown compiler" : binary.compiler));
  }
  throw Error(std::move(diagnostic));
}

class DeviceExecutable final : public CudaExecutable {
 public:
  DeviceExecutable(const DriverApi& api, const codegen::Program& program, ProgramBindings bindings,
                   const CudaBinary& binary, const std::vector<ir::Tensor>& parameters,
                   const CudaOptions& options);
  ~DeviceExecutable() override;

  std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs, RunProfile* profile) override;
  void submit(const std::vector<ir::Tensor>& inputs) override;
  std::vector<ir::Tensor> run_views(const std::vector<ir::TensorView>& inputs) override;
  std::vector<ir::Tensor> collect() override;
  size_t pending() const override { return pending_.size(); }
  // run() on inputs padded to the program's types; `sizes`: each symbol's size in this run
  // (empty: the bounds), for the kernels that compute only the real rows.
  std::vector<ir::Tensor> run_at_bounds(const std::vector<ir::Tensor>& inputs,
                                        const std::vector<int64_t>& sizes, RunProfile* profile);
  ir::Tensor parameter(int index) override;
  void set_parameter(int index, const ir::Tensor& value) override;
  std::string device_name() const override { return device_.name; }
  std::string loaded_code() const override { return loaded_code_; }
  std::vector<std::string> library_report() const override { return library_report_; }

 private:
  struct Launch {
    const codegen::Kernel* kernel = nullptr;  // into program_.kernels, which never changes
    CUfunction function = nullptr;
    std::vector<CUdeviceptr> args;  // the device address of each argument buffer
    std::vector<void*> params;      // &args[i]: what cuLaunchKernel reads each argument from
    std::unique_ptr<LibraryRunner> library;  // set: a library call instead of the kernel
  };

  void make_current() const { api_.check(api_.cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }
  CUdeviceptr address(int buffer_id) const {
    return arena_.get() + static_cast<CUdeviceptr>(layout_.offsets[buffer_id]);
  }
  codegen::LibrarySelection load_libraries(const CudaOptions& options);
  void load_functions(CUdevice device, CUmodule module);
  void allocate_arena(const std::vector<ir::Tensor>& parameters);
  void prepare_library_calls(const CudaOptions& options);
  // A submitted run: the staging slot it downloads into, or (dynamic dims: those runs are
  // synchronous) its outputs already.
  struct Pending {
    int slot = -1;
    std::vector<ir::Tensor> outputs;
  };
  // Stages `inputs` in the next slot and enqueues the whole run; returns the slot.
  int enqueue_run(const std::vector<ir::TensorView>& inputs, const std::vector<int64_t>& sizes,
                  RunProfile* profile);
  // Waits for the run in `slot` and returns its outputs.
  std::vector<ir::Tensor> finish_run(int slot);
  void enqueue(Launch& launch);
  void enqueue_all();
  void enqueue_profiled(RunProfile& profile);
  void capture_graph();

  const DriverApi& api_;
  codegen::Program program_;  // without its source: only the tables are needed
  ProgramBindings bindings_;
  ArenaLayout layout_;
  CudaDeviceInfo device_;
  std::string loaded_code_;
  bool use_graph_;
  codegen::LibrarySelection libraries_;  // requested and loaded
  std::vector<std::string> library_report_;
  CUcontext context_ = nullptr;
  // Declared in acquisition order, so they are released in reverse: the library calls and
  // the graph, the library handles, the stream and module, the arena, and last the context
  // they all live in.
  Owned<CUdevice> primary_context_;
  Owned<CUdeviceptr> arena_;
  Owned<CUmodule> module_;
  Owned<CUstream> stream_;
  std::unique_ptr<PinnedStaging> staging_;
  std::deque<Pending> pending_;
  int next_slot_ = 0;
  std::unique_ptr<LibraryContext> library_context_;
  std::unique_ptr<DeviceBuckets> buckets_;  // data-parallel: the all_reduce kernels over NCCL
  Owned<CUgraphExec> graph_;
  std::vector<int64_t> graph_sizes_;  // the sizes graph_ was captured with: its launches' grids
  std::vector<Launch> launches_;
  // This run's size of each symbol: dim_sizes_ is what the kernels of real rows read their
  // last argument from (sized once, so the launches' parameter arrays may point into it).
  std::vector<int64_t> sizes_;
  std::vector<int> dim_sizes_;
};

DeviceExecutable::DeviceExecutable(const DriverApi& api, const codegen::Program& program,
                                   ProgramBindings bindings, const CudaBinary& binary,
                                   const std::vector<ir::Tensor>& parameters,
                                   const CudaOptions& options)
    : api_(api),
      program_(program),
      bindings_(std::move(bindings)),
      use_graph_(options.use_cuda_graph) {
  program_.source.clear();
  for (const ir::DimSymbol& symbol : program_.symbols) dim_sizes_.push_back(static_cast<int>(symbol.bound));
  libraries_ = load_libraries(options);
  layout_ = plan_arena(program_.buffers, library_workspace_bytes(program_, libraries_));
  CUdevice device = open_device(api_, options.device);
  device_ = query_device(api_, device);
  std::optional<CodeChoice> code = select_code(binary, device_.sm);
  if (!code) {
    throw Error("", fmt::format("CUDA backend: graph '{}' has no code that runs on device {} "
                                "('{}', {}): the binary holds {}; compile for {} too",
                                program_.graph_name, options.device, device_.name,
                                device_.arch(), describe_code(binary), device_.arch()));
  }

  CUcontext context = nullptr;
  api_.check(api_.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  primary_context_ = Owned<CUdevice>(device, api_.cuDevicePrimaryCtxRelease_v2);
  context_ = context;
  make_current();

  if (code->kind == CodeKind::Cubin) {
    loaded_code_ = "cubin " + code->arch;
    module_ = load_module(api_, binary.cubins.at(code->arch).data(), loaded_code_, binary);
  } else {
    loaded_code_ = fmt::format("PTX {} (JIT for {})", code->arch, device_.arch());
    // std::string keeps its text NUL-terminated, as the driver needs PTX to be.
    module_ = load_module(api_, binary.ptx.c_str(), loaded_code_, binary);
  }
  load_functions(device, module_.get());

  CUstream stream = nullptr;
  // Non-blocking: no implicit ordering with the legacy default stream, which other code in the
  // process may use and which would also make a capture on this stream fail.
  api_.check(api_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  stream_ = Owned<CUstream>(stream, api_.cuStreamDestroy_v2);
  std::vector<int64_t> input_bytes, output_bytes;
  for (int id : bindings_.inputs) input_bytes.push_back(ir::tensor_bytes(program_.buffers[id].type));
  for (int id : bindings_.outputs) output_bytes.push_back(ir::tensor_bytes(program_.buffers[id].type));
  staging_ = std::make_unique<PinnedStaging>(api_, input_bytes, output_bytes);

  allocate_arena(parameters);
  prepare_library_calls(options);
  // Data-parallel training: the collective kernels become NCCL calls across the ranks.
  if (options.communicator != nullptr &&
      std::any_of(program_.kernels.begin(), program_.kernels.end(),
                  [](const codegen::Kernel& k) { return k.collective.has_value(); })) {
    std::vector<CUdeviceptr> addresses;
    for (size_t id = 0; id < program_.buffers.size(); ++id) addresses.push_back(address(static_cast<int>(id)));
    buckets_ = std::make_unique<DeviceBuckets>(api_, nccl(options.library_paths.nccl), program_,
                                               *options.communicator, std::move(addresses));
    use_graph_ = false;  // kernel by kernel (nccl_api.h says why)
  }
}

codegen::LibrarySelection DeviceExecutable::load_libraries(const CudaOptions& options) {
  // Only the libraries the kernel table asks for are loaded: dlopen of cuDNN alone maps
  // hundreds of megabytes of code.
  codegen::LibrarySelection wanted;
  for (const codegen::Kernel& kernel : program_.kernels) {
    if (!kernel.library || !kernel.library->selected_by(options.libraries)) continue;
    (kernel.library->library == codegen::kCudnnLibrary ? wanted.cudnn : wanted.cublaslt) = true;
  }
  auto loads = [&](bool want, auto load) {
    if (!want) return false;
    try {
      load();
      return true;
    } catch (const Error& error) {
      library_report_.push_back(error.diagnostic().message);
      return false;
    }
  };
  codegen::LibrarySelection loaded;
  loaded.cublaslt = loads(wanted.cublaslt, [&] { cublaslt(options.library_paths.cublaslt); });
  loaded.cudnn = loads(wanted.cudnn, [&] { cudnn(options.library_paths.cudnn); });
  return loaded;
}

DeviceExecutable::~DeviceExecutable() {
  // Releases need the context current on this thread and must not free memory in use; errors
  // are ignored (see Owned), so a faulted context still tears down without throwing.
  if (api_.cuCtxSetCurrent(context_) == CUDA_SUCCESS && stream_.owns())
    (void)api_.cuStreamSynchronize(stream_.get());
}

void DeviceExecutable::load_functions(CUdevice device, CUmodule module) {
  std::optional<int> shared_limit;  // queried only when a kernel needs more than the default
  for (const codegen::Kernel& kernel : program_.kernels) {
    Launch launch;
    launch.kernel = &kernel;
    api_.check(api_.cuModuleGetFunction(&launch.function, module, kernel.function().c_str()),
               "cuModuleGetFunction",
               kernel.entry.empty() ? fmt::format("kernel '{}'", kernel.name)
                                    : fmt::format("kernel '{}' (function '{}')", kernel.name, kernel.entry));
    if (kernel.dynamic_shared_bytes > kDefaultDynamicSharedBytes) {
      if (!shared_limit) {
        shared_limit = device_attribute(api_, device,
                                        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                        "max shared memory per block (opt-in)");
      }
      if (kernel.dynamic_shared_bytes > static_cast<uint32_t>(*shared_limit)) {
        throw Error("", fmt::format("CUDA backend: kernel '{}' needs {} B of shared memory per "
                                    "block; device '{}' ({}) allows at most {} B",
                                    kernel.name, kernel.dynamic_shared_bytes, device_.name,
                                    device_.arch(), *shared_limit));
      }
      api_.check(api_.cuFuncSetAttribute(launch.function,
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(kernel.dynamic_shared_bytes)),
                 "cuFuncSetAttribute", kernel_launch_context(kernel));
    }
    launches_.push_back(std::move(launch));
  }
}

void DeviceExecutable::allocate_arena(const std::vector<ir::Tensor>& parameters) {
  // cuMemAlloc rejects 0 bytes; a program without buffers needs no arena.
  if (layout_.total_bytes > 0) {
    CUdeviceptr arena = 0;
    api_.check(api_.cuMemAlloc_v2(&arena, static_cast<size_t>(layout_.total_bytes)),
               "cuMemAlloc", fmt::format("the {} B arena of graph '{}'", layout_.total_bytes,
                                         program_.graph_name));
    arena_ = Owned<CUdeviceptr>(arena, api_.cuMemFree_v2);
    // Zeroed once, so a kernel that misses an element yields the same wrong answer every time.
    api_.check(api_.cuMemsetD8Async(arena, 0, static_cast<size_t>(layout_.total_bytes),
                                    stream_.get()),
               "cuMemsetD8Async");
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    int id = bindings_.parameters[i];
    api_.check(api_.cuMemcpyHtoDAsync_v2(address(id), parameters[i].data(),
                                         parameters[i].byte_size(), stream_.get()),
               "cuMemcpyHtoDAsync", fmt::format("parameter '{}'", program_.buffers[id].name));
  }
  // The addresses are final now, so every launch's argument array can point into them.
  for (Launch& launch : launches_) {
    for (int id : launch.kernel->args) launch.args.push_back(address(id));
    for (CUdeviceptr& arg : launch.args) launch.params.push_back(&arg);
    if (launch.kernel->dynamic_symbol >= 0)
      launch.params.push_back(&dim_sizes_.at(static_cast<size_t>(launch.kernel->dynamic_symbol)));
  }
  // Upload errors belong to create(), not to the first run.
  api_.check(api_.cuStreamSynchronize(stream_.get()), "cuStreamSynchronize",
             fmt::format("uploading the parameters of graph '{}'", program_.graph_name));
}

void DeviceExecutable::prepare_library_calls(const CudaOptions& options) {
  LibraryOperands operands;
  if (layout_.workspace_offset >= 0) {
    operands.workspace = arena_.get() + static_cast<CUdeviceptr>(layout_.workspace_offset);
    operands.workspace_bytes = static_cast<size_t>(layout_.workspace_bytes);
  }
  for (Launch& launch : launches_) {
    const codegen::Kernel& kernel = *launch.kernel;
    if (!kernel.library) continue;
    const codegen::LibraryCall& call = *kernel.library;
    std::string why;
    if (!call.selected_by(options.libraries)) {
      why = fmt::format("--library excludes {}", call.library);
    } else if (!call.selected_by(libraries_)) {
      why = fmt::format("{} did not load", call.library);  // the reason is reported above
    } else {
      if (!library_context_)
        library_context_ = std::make_unique<LibraryContext>(stream_.get(), options.library_paths);
      operands.args = launch.args;
      std::unique_ptr<LibraryRunner> runner;
      try {
        runner = prepare_library_call(*library_context_, call, operands, kernel.name);
        // Once outside any capture, on the zeroed arena: a library's first call may load
        // code or allocate, which a graph capture would not allow, and a call the library
        // refuses is best found here, where the generated kernel can still take over.
        runner->enqueue();
      } catch (const Error& error) {
        runner.reset();
        why = error.diagnostic().message;
      }
      if (runner) {
        // A fault on the device is no refusal: the context is gone, and create() fails.
        api_.check(api_.cuStreamSynchronize(stream_.get()), "cuStreamSynchronize",
                   fmt::format("the first {} call of kernel '{}'", call.library, kernel.name));
        launch.library = std::move(runner);
      }
    }
    if (launch.library) {
      library_report_.push_back(fmt::format("{}: {} {} ({})", kernel.name, call.library,
                                            call.descriptor, launch.library->choice()));
    } else {
      library_report_.push_back(fmt::format("{}: generated kernel: {}", kernel.name, why));
    }
  }
}

void DeviceExecutable::enqueue(Launch& launch) {
  if (buckets_) {
    const auto index = static_cast<size_t>(launch.kernel - program_.kernels.data());
    buckets_->before(index, stream_.get());
    if (launch.kernel->collective) {
      buckets_->start(index, stream_.get());
      return;
    }
  }
  if (launch.library) {
    launch.library->enqueue();
    return;
  }
  const codegen::Kernel& kernel = *launch.kernel;
  const codegen::Dim3 grid = codegen::launch_grid(kernel, program_.symbols, sizes_);
  api_.check(api_.cuLaunchKernel(launch.function, grid.x, grid.y, grid.z,
                                 kernel.block.x, kernel.block.y, kernel.block.z,
                                 kernel.dynamic_shared_bytes, stream_.get(),
                                 launch.params.data(), nullptr),
             "cuLaunchKernel", kernel_launch_context(kernel));
}

void DeviceExecutable::enqueue_all() {
  for (Launch& launch : launches_) enqueue(launch);
  if (buckets_) buckets_->finish_all(stream_.get());
}

// Each launch between two events on the stream; the times are read after the launches, so the
// events do not serialize the host with the device.
void DeviceExecutable::enqueue_profiled(RunProfile& profile) {
  std::vector<Owned<CUevent>> events;
  for (size_t i = 0; i <= launches_.size(); ++i) {
    CUevent event = nullptr;
    api_.check(api_.cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate");
    events.emplace_back(event, api_.cuEventDestroy_v2);
  }
  for (size_t i = 0; i < launches_.size(); ++i) {
    api_.check(api_.cuEventRecord(events[i].get(), stream_.get()), "cuEventRecord");
    enqueue(launches_[i]);
  }
  if (buckets_) buckets_->finish_all(stream_.get());
  api_.check(api_.cuEventRecord(events.back().get(), stream_.get()), "cuEventRecord");
  api_.check(api_.cuEventSynchronize(events.back().get()), "cuEventSynchronize",
             fmt::format("running graph '{}'", program_.graph_name));
  profile.backend = "cuda";
  profile.device = device_.name;
  profile.kernels.clear();
  for (size_t i = 0; i < launches_.size(); ++i) {
    float start_ms = 0, duration_ms = 0;
    api_.check(api_.cuEventElapsedTime_v2(&start_ms, events[0].get(), events[i].get()), "cuEventElapsedTime");
    api_.check(api_.cuEventElapsedTime_v2(&duration_ms, events[i].get(), events[i + 1].get()),
               "cuEventElapsedTime");
    profile.kernels.push_back({static_cast<int>(launches_[i].kernel - program_.kernels.data()),
                               1000.0 * start_ms, 1000.0 * duration_ms});
  }
}

void DeviceExecutable::capture_graph() {
  // Thread-local mode: only this thread's calls are checked for capture safety, so other
  // threads of a host application may keep allocating while we capture.
  api_.check(api_.cuStreamBeginCapture_v2(stream_.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
             "cuStreamBeginCapture");
  std::optional<Error> failure;
  try {
    enqueue_all();
  } catch (const Error& error) {
    failure = error;
  }
  // Capture always ends, even after a failed launch, or the stream stays unusable.
  CUgraph graph = nullptr;
  CUresult end_result = api_.cuStreamEndCapture(stream_.get(), &graph);
  Owned<CUgraph> graph_owner;
  if (graph != nullptr) graph_owner = Owned<CUgraph>(graph, api_.cuGraphDestroy);
  if (failure) throw *failure;
  api_.check(end_result, "cuStreamEndCapture");

  CUgraphExec exec = nullptr;
  api_.check(api_.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate",
             fmt::format("graph '{}'", program_.graph_name));
  graph_ = Owned<CUgraphExec>(exec, api_.cuGraphExecDestroy);
  // The executable graph is independent of the captured one, which graph_owner frees now.
}

std::vector<ir::Tensor> DeviceExecutable::run(const std::vector<ir::Tensor>& inputs, RunProfile* profile) {
  KILN_CHECK(pending_.empty()) << "run() with " << pending_.size() << " submitted runs not collected";
  return codegen::run_with_dynamic_dims(
      program_, inputs, [&](const std::vector<ir::Tensor>& bound, const std::vector<int64_t>& sizes) {
        return run_at_bounds(bound, sizes, profile);
      });
}

std::vector<ir::Tensor> DeviceExecutable::run_at_bounds(const std::vector<ir::Tensor>& inputs,
                                                        const std::vector<int64_t>& sizes, RunProfile* profile) {
  return finish_run(enqueue_run(ir::views_of(inputs), sizes, profile));
}

std::vector<ir::Tensor> DeviceExecutable::run_views(const std::vector<ir::TensorView>& inputs) {
  KILN_CHECK(pending_.empty()) << "run_views() with " << pending_.size() << " submitted runs not collected";
  if (!program_.symbols.empty()) return run(ir::copies_of(inputs), nullptr);
  return finish_run(enqueue_run(inputs, {}, nullptr));
}

void DeviceExecutable::submit(const std::vector<ir::Tensor>& inputs) {
  KILN_CHECK(pending_.size() < 2) << "submit() with both staging slots in use: collect() first";
  // Dynamic dims pad the inputs and slice the outputs around each run: those run at once.
  if (!program_.symbols.empty()) {
    std::vector<ir::Tensor> outputs = codegen::run_with_dynamic_dims(
        program_, inputs, [&](const std::vector<ir::Tensor>& bound, const std::vector<int64_t>& sizes) {
          return run_at_bounds(bound, sizes, nullptr);
        });
    pending_.push_back(Pending{-1, std::move(outputs)});
    return;
  }
  pending_.push_back(Pending{enqueue_run(ir::views_of(inputs), {}, nullptr), {}});
}

std::vector<ir::Tensor> DeviceExecutable::collect() {
  KILN_CHECK(!pending_.empty()) << "collect() without a submitted run";
  Pending oldest = std::move(pending_.front());
  pending_.pop_front();
  return oldest.slot < 0 ? std::move(oldest.outputs) : finish_run(oldest.slot);
}

int DeviceExecutable::enqueue_run(const std::vector<ir::TensorView>& inputs,
                                  const std::vector<int64_t>& sizes, RunProfile* profile) {
  check_tensors(program_, "input", bindings_.inputs, inputs);
  make_current();
  sizes_ = sizes;
  for (size_t i = 0; i < sizes.size() && i < dim_sizes_.size(); ++i) dim_sizes_[i] = static_cast<int>(sizes[i]);
  CUstream stream = stream_.get();
  const int index = next_slot_;
  next_slot_ ^= 1;
  PinnedStaging::Slot& slot = staging_->slot(index);
  // The slot's inputs are overwritten only once the copies of its last run have read them.
  if (slot.used)
    api_.check(api_.cuEventSynchronize(slot.uploaded.get()), "cuEventSynchronize",
               "the previous upload from a staging slot");
  for (size_t i = 0; i < inputs.size(); ++i) {
    int id = bindings_.inputs[i];
    std::byte* staged = slot.inputs + staging_->input_offset(i);
    std::memcpy(staged, inputs[i].data, inputs[i].byte_size());
    api_.check(api_.cuMemcpyHtoDAsync_v2(address(id), staged, inputs[i].byte_size(), stream),
               "cuMemcpyHtoDAsync", fmt::format("input '{}'", program_.buffers[id].name));
  }
  api_.check(api_.cuEventRecord(slot.uploaded.get(), stream), "cuEventRecord", "inputs uploaded");

  if (profile) {
    enqueue_profiled(*profile);
  } else if (use_graph_ && !launches_.empty()) {
    // A graph holds its launches' grids and arguments: another run size needs another capture.
    if (graph_.owns() && graph_sizes_ != sizes_) graph_ = Owned<CUgraphExec>();
    if (!graph_.owns()) {
      capture_graph();
      graph_sizes_ = sizes_;
    }
    api_.check(api_.cuGraphLaunch(graph_.get(), stream), "cuGraphLaunch",
               fmt::format("graph '{}'", program_.graph_name));
  } else {
    enqueue_all();
  }

  for (size_t i = 0; i < bindings_.outputs.size(); ++i) {
    const int id = bindings_.outputs[i];
    const codegen::Buffer& buffer = program_.buffers[id];
    api_.check(api_.cuMemcpyDtoHAsync_v2(slot.outputs + staging_->output_offset(i), address(id),
                                         static_cast<size_t>(ir::tensor_bytes(buffer.type)), stream),
               "cuMemcpyDtoHAsync", fmt::format("output '{}'", buffer.name));
  }
  // After the outputs are read, on the same stream: each next.P becomes parameter P.
  for (const codegen::Program::StateUpdate& update : program_.state_updates) {
    if (update.in_place()) continue;  // the step wrote it already
    const codegen::Buffer& buffer = program_.buffers[update.output];
    api_.check(api_.cuMemcpyDtoDAsync_v2(address(update.parameter), address(update.output),
                                         static_cast<size_t>(buffer.bytes), stream),
               "cuMemcpyDtoDAsync", fmt::format("state '{}'", buffer.name));
  }
  api_.check(api_.cuEventRecord(slot.done.get(), stream), "cuEventRecord", "run finished");
  slot.used = true;
  return index;
}

std::vector<ir::Tensor> DeviceExecutable::finish_run(int index) {
  PinnedStaging::Slot& slot = staging_->slot(index);
  make_current();
  // Kernel faults surface here (or in the copies above), after the launches that caused them.
  api_.check(api_.cuEventSynchronize(slot.done.get()), "cuEventSynchronize",
             fmt::format("running graph '{}'", program_.graph_name));
  std::vector<ir::Tensor> outputs;
  outputs.reserve(bindings_.outputs.size());
  for (size_t i = 0; i < bindings_.outputs.size(); ++i) {
    ir::Tensor& output = outputs.emplace_back(program_.buffers[bindings_.outputs[i]].type);
    std::memcpy(output.data(), slot.outputs + staging_->output_offset(i), output.byte_size());
  }
  return outputs;
}

ir::Tensor DeviceExecutable::parameter(int index) {
  const int id = bindings_.parameters.at(static_cast<size_t>(index));
  const codegen::Buffer& buffer = program_.buffers[id];
  make_current();
  ir::Tensor value(buffer.type);
  api_.check(api_.cuMemcpyDtoHAsync_v2(value.data(), address(id), value.byte_size(), stream_.get()),
             "cuMemcpyDtoHAsync", fmt::format("parameter '{}'", buffer.name));
  api_.check(api_.cuStreamSynchronize(stream_.get()), "cuStreamSynchronize",
             fmt::format("reading parameter '{}'", buffer.name));
  return value;
}

void DeviceExecutable::set_parameter(int index, const ir::Tensor& value) {
  const int id = bindings_.parameters.at(static_cast<size_t>(index));
  const codegen::Buffer& buffer = program_.buffers[id];
  if (value.type() != buffer.type)
    throw Error("", fmt::format("CUDA backend: parameter '{}': expected {}, got {}", buffer.name,
                                buffer.type.to_string(), value.type().to_string()));
  make_current();
  api_.check(api_.cuMemcpyHtoDAsync_v2(address(id), value.data(), value.byte_size(), stream_.get()),
             "cuMemcpyHtoDAsync", fmt::format("parameter '{}'", buffer.name));
  // The source is the caller's memory: wait before returning it.
  api_.check(api_.cuStreamSynchronize(stream_.get()), "cuStreamSynchronize",
             fmt::format("writing parameter '{}'", buffer.name));
}

}  // namespace

bool cuda_available(std::string* why) {
  try {
    const DriverApi& api = driver();
    int count = 0;
    api.check(api.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (count > 0) return true;
    if (why != nullptr) *why = "no CUDA device";
  } catch (const Error& error) {
    if (why != nullptr) *why = unavailable_reason(error);
  }
  return false;
}

std::string auto_backend(bool verbose, std::ostream& notices) {
  std::string why;
  if (cuda_available(&why)) return "cuda";
  const bool no_driver = why.starts_with(std::string(kDriverLibrary) + " not found");
  if (verbose || !no_driver) notices << "kiln: running on the CPU (host backend): " << why << "\n";
  return "host";
}

CudaDeviceInfo cuda_device_info(int device) {
  const DriverApi& api = driver();
  return query_device(api, open_device(api, device));
}

std::unique_ptr<CudaExecutable> CudaExecutable::create(const codegen::Program& program,
                                                       const CudaBinary& binary,
                                                       const std::vector<ir::Tensor>& parameters,
                                                       const CudaOptions& options) {
  // What needs no device is checked first, so a bad call fails the same way everywhere.
  check_tensors(program, "parameter", bind_program(program).parameters, parameters);
  return create_with_driver(driver(), program, binary, parameters, options);
}

std::unique_ptr<CudaExecutable> CudaExecutable::create_with_driver(
    const DriverApi& driver, const codegen::Program& program, const CudaBinary& binary,
    const std::vector<ir::Tensor>& parameters, const CudaOptions& options) {
  ProgramBindings bindings = bind_program(program);
  check_tensors(program, "parameter", bindings.parameters, parameters);
  return std::make_unique<DeviceExecutable>(driver, program, std::move(bindings), binary,
                                            parameters, options);
}

}  // namespace kiln::runtime::cuda
