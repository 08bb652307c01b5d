// The mock libcuda (see mock_libcuda.h). Every function is defined against cuda.h's own
// declaration, so a signature that differs from the real driver's does not compile.
#include "tests/mocks/mock_libcuda.h"

#include <chrono>
#include <optional>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr int kDefaultDynamicShared = 48 * 1024;

struct MockContext {
  int refs = 0;
};

struct MockFunction {
  std::string name;
  int arity = 0;
  KilnMockKernel kernel = nullptr;
  int max_dynamic_shared = kDefaultDynamicShared;
};

struct MockModule {
  std::vector<std::unique_ptr<MockFunction>> functions;
};

struct Launch {
  MockFunction* function = nullptr;
  std::vector<void*> args;
  unsigned long long threads = 0;
};

struct MockStream {
  bool capturing = false;
  bool invalidated = false;  // a call failed during the capture
  std::vector<Launch> captured;
};

struct Registration {
  int arity;
  KilnMockKernel kernel;
};

struct State {
  std::mutex mutex;
  KilnMockConfig config;
  bool initialized = false;
  std::vector<MockContext> contexts = std::vector<MockContext>(1);
  std::map<std::string, Registration> kernels;
  std::map<std::string, CUresult> failures;
  std::set<MockModule*> modules;
  std::set<MockStream*> streams;
  std::map<uintptr_t, size_t> allocations;  // start → bytes
  std::map<uintptr_t, size_t> pinned;       // page-locked host memory: start → bytes
  std::set<std::vector<Launch>*> graphs;
  std::set<std::vector<Launch>*> graph_execs;
  // Streams run their work when it is enqueued, so an event's time is when it was recorded.
  std::map<CUevent, std::optional<std::chrono::steady_clock::time_point>> events;
  KilnMockStats stats;
};

State& state() {
  static State* s = new State();  // leaked: handles may be released during static destruction
  return *s;
}

thread_local MockContext* current = nullptr;

CUresult take_failure(const char* symbol) {
  auto it = state().failures.find(symbol);
  if (it == state().failures.end()) return CUDA_SUCCESS;
  CUresult result = it->second;
  state().failures.erase(it);
  return result;
}

// The common preamble: lock, injected failure, initialization.
#define MOCK_ENTER()                                                   \
  std::lock_guard<std::mutex> lock(state().mutex);                     \
  if (CUresult failure = take_failure(__func__); failure != CUDA_SUCCESS) \
    return failure;                                                    \
  if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED

#define MOCK_NEED_CONTEXT() \
  if (current == nullptr || current->refs == 0) return CUDA_ERROR_INVALID_CONTEXT

// Whether [address, address + bytes) lies inside one live allocation.
bool in_range(const std::map<uintptr_t, size_t>& ranges, uintptr_t address, size_t bytes) {
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return false;
  --it;
  return address >= it->first && address + bytes <= it->first + it->second;
}

bool in_allocation(uintptr_t address, size_t bytes) {
  return in_range(state().allocations, address, bytes);
}

// Counts a host-side copy operand as pinned or pageable.
void count_host_copy(const void* host, size_t bytes, int& pinned, int& pageable) {
  ++(in_range(state().pinned, reinterpret_cast<uintptr_t>(host), bytes) ? pinned : pageable);
}

MockStream* find_stream(CUstream stream) {
  auto* mock = reinterpret_cast<MockStream*>(stream);
  return state().streams.contains(mock) ? mock : nullptr;
}

void run(const std::vector<Launch>& launches) {
  for (const Launch& launch : launches) {
    launch.function->kernel(launch.args.data(), launch.threads);
    ++state().stats.kernel_runs;
  }
}

const std::map<CUresult, std::pair<const char*, const char*>> kErrorNames = {
    {CUDA_SUCCESS, {"CUDA_SUCCESS", "no error"}},
    {CUDA_ERROR_INVALID_VALUE, {"CUDA_ERROR_INVALID_VALUE", "invalid argument"}},
    {CUDA_ERROR_OUT_OF_MEMORY, {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"}},
    {CUDA_ERROR_NOT_INITIALIZED, {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"}},
    {CUDA_ERROR_INVALID_CONTEXT, {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"}},
    {CUDA_ERROR_INVALID_PTX, {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"}},
    {CUDA_ERROR_NOT_FOUND, {"CUDA_ERROR_NOT_FOUND", "named symbol not found"}},
    {CUDA_ERROR_ILLEGAL_ADDRESS,
     {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"}},
    {CUDA_ERROR_ILLEGAL_STATE, {"CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted"}},
};

}  // namespace

extern "C" {

void kiln_mock_reset(const KilnMockConfig* config) {
  std::lock_guard<std::mutex> lock(state().mutex);
  State& s = state();
  s.config = *config;
  s.contexts = std::vector<MockContext>(static_cast<size_t>(std::max(config->device_count, 1)));
  s.kernels.clear();
  s.failures.clear();
  // What a test left behind on purpose (a release made to fail) is freed here.
  for (MockModule* module : s.modules) delete module;
  s.modules.clear();
  for (MockStream* stream : s.streams) delete stream;
  s.streams.clear();
  for (const auto& [address, bytes] : s.allocations) std::free(reinterpret_cast<void*>(address));
  s.allocations.clear();
  for (const auto& [address, bytes] : s.pinned) std::free(reinterpret_cast<void*>(address));
  s.pinned.clear();
  for (std::vector<Launch>* graph : s.graphs) delete graph;
  s.graphs.clear();
  for (std::vector<Launch>* exec : s.graph_execs) delete exec;
  s.graph_execs.clear();
  for (const auto& [event, time] : s.events) delete reinterpret_cast<int*>(event);
  s.events.clear();
  s.stats = KilnMockStats{};
  current = nullptr;
}

void kiln_mock_register_kernel(const char* name, int arity, KilnMockKernel kernel) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().kernels[name] = Registration{arity, kernel};
}

void kiln_mock_fail_next(const char* symbol, CUresult result) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().failures[symbol] = result;
}

void kiln_mock_stats(KilnMockStats* stats) {
  std::lock_guard<std::mutex> lock(state().mutex);
  State& s = state();
  *stats = s.stats;
  stats->context_references = 0;
  for (const MockContext& context : s.contexts) stats->context_references += context.refs;
  stats->modules = static_cast<int>(s.modules.size());
  stats->streams = static_cast<int>(s.streams.size());
  stats->allocations = static_cast<int>(s.allocations.size());
  stats->graphs = static_cast<int>(s.graphs.size());
  stats->graph_execs = static_cast<int>(s.graph_execs.size());
  stats->events = static_cast<int>(s.events.size());
  stats->capturing = false;
  for (MockStream* stream : s.streams) stats->capturing |= stream->capturing;
}

CUresult CUDAAPI cuInit(unsigned int flags) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (CUresult failure = take_failure(__func__); failure != CUDA_SUCCESS) return failure;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  state().initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  auto it = kErrorNames.find(error);
  *name = it == kErrorNames.end() ? nullptr : it->second.first;
  return it == kErrorNames.end() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** description) {
  auto it = kErrorNames.find(error);
  *description = it == kErrorNames.end() ? nullptr : it->second.second;
  return it == kErrorNames.end() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  MOCK_ENTER();
  *count = state().config.device_count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  MOCK_ENTER();
  if (ordinal < 0 || ordinal >= state().config.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  MOCK_ENTER();
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(length), "Kiln Mock GPU %d", device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  MOCK_ENTER();
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = state().config.major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = state().config.minor; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = state().config.optin_shared_bytes;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  MOCK_ENTER();
  if (device < 0 || device >= state().config.device_count) return CUDA_ERROR_INVALID_DEVICE;
  ++state().contexts[device].refs;
  *context = reinterpret_cast<CUcontext>(&state().contexts[device]);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  MOCK_ENTER();
  if (device < 0 || device >= state().config.device_count) return CUDA_ERROR_INVALID_DEVICE;
  if (state().contexts[device].refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --state().contexts[device].refs;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  MOCK_ENTER();
  auto* mock = reinterpret_cast<MockContext*>(context);
  if (mock != nullptr && mock->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  current = mock;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count,
                                    CUjit_option* options, void** values) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  const char* text = static_cast<const char*>(image);
  bool cubin = std::memcmp(text, "\x7f" "ELF", 4) == 0;
  if (!cubin && std::strstr(text, "invalid") != nullptr) {
    char* log = nullptr;
    unsigned int log_size = 0;
    for (unsigned int i = 0; i < count; ++i) {
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER) log = static_cast<char*>(values[i]);
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        log_size = static_cast<unsigned int>(reinterpret_cast<uintptr_t>(values[i]));
    }
    if (log != nullptr && log_size > 0) std::snprintf(log, log_size, "mock ptxas: syntax error");
    return CUDA_ERROR_INVALID_PTX;
  }
  auto* mock = new MockModule();
  state().modules.insert(mock);
  state().stats.loaded_ptx = !cubin;
  *module = reinterpret_cast<CUmodule>(mock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  auto* mock = reinterpret_cast<MockModule*>(module);
  if (state().modules.erase(mock) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete mock;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  auto* mock = reinterpret_cast<MockModule*>(module);
  if (!state().modules.contains(mock)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = state().kernels.find(name);
  if (it == state().kernels.end()) return CUDA_ERROR_NOT_FOUND;
  mock->functions.push_back(std::make_unique<MockFunction>(
      MockFunction{name, it->second.arity, it->second.kernel, kDefaultDynamicShared}));
  *function = reinterpret_cast<CUfunction>(mock->functions.back().get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute,
                                    int value) {
  MOCK_ENTER();
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    return CUDA_ERROR_INVALID_VALUE;
  if (value < 0 || value > state().config.optin_shared_bytes) return CUDA_ERROR_INVALID_VALUE;
  reinterpret_cast<MockFunction*>(function)->max_dynamic_shared = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(memory, 0xAB, bytes);  // garbage, as fresh device memory may hold
  state().allocations[reinterpret_cast<uintptr_t>(memory)] = bytes;
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr pointer) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  if (state().allocations.erase(static_cast<uintptr_t>(pointer)) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(pointer));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  if (pointer == nullptr || bytes == 0 || (flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);  // whole pages
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  state().pinned[reinterpret_cast<uintptr_t>(memory)] = bytes;
  ++state().stats.pinned_allocations;
  *pointer = memory;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void* pointer) {
  MOCK_ENTER();
  if (state().pinned.erase(reinterpret_cast<uintptr_t>(pointer)) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(pointer);
  --state().stats.pinned_allocations;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr destination, unsigned char value, size_t count,
                                 CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (mock->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // kiln captures launches only
  if (!in_allocation(destination, count)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(destination), value, count);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr destination, const void* source, size_t bytes,
                                      CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (mock->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!in_allocation(destination, bytes)) return CUDA_ERROR_INVALID_VALUE;
  count_host_copy(source, bytes, state().stats.pinned_uploads, state().stats.pageable_uploads);
  std::memcpy(reinterpret_cast<void*>(destination), source, bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* destination, CUdeviceptr source, size_t bytes,
                                      CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (mock->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!in_allocation(source, bytes)) return CUDA_ERROR_INVALID_VALUE;
  count_host_copy(destination, bytes, state().stats.pinned_downloads, state().stats.pageable_downloads);
  std::memcpy(destination, reinterpret_cast<const void*>(source), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
                                      CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (mock->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!in_allocation(source, bytes) || !in_allocation(destination, bytes))
    return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void*>(destination), reinterpret_cast<const void*>(source), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  auto* mock = new MockStream();
  state().streams.insert(mock);
  *stream = reinterpret_cast<CUstream>(mock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream stream) {
  MOCK_ENTER();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  state().streams.erase(mock);
  delete mock;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return mock->capturing ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

// Streams run synchronously here: the event a stream waits for has already happened.
CUresult CUDAAPI cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  if (find_stream(stream) == nullptr || !state().events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ++state().stats.event_waits;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                void** params, void** extra) {
  std::lock_guard<std::mutex> lock(state().mutex);
  MockStream* mock = find_stream(stream);
  // Like the driver, any failed call on a capturing stream invalidates the capture.
  auto fail = [&](CUresult result) {
    if (mock != nullptr && mock->capturing) mock->invalidated = true;
    return result;
  };
  if (CUresult failure = take_failure(__func__); failure != CUDA_SUCCESS) return fail(failure);
  if (current == nullptr || current->refs == 0) return fail(CUDA_ERROR_INVALID_CONTEXT);
  if (mock == nullptr) return fail(CUDA_ERROR_INVALID_HANDLE);
  auto* mock_function = reinterpret_cast<MockFunction*>(function);
  unsigned long long block = 1ull * block_x * block_y * block_z;
  unsigned long long threads = 1ull * grid_x * grid_y * grid_z * block;
  if (threads == 0 || block > 1024 || extra != nullptr) return fail(CUDA_ERROR_INVALID_VALUE);
  if (static_cast<int>(shared_bytes) > mock_function->max_dynamic_shared)
    return fail(CUDA_ERROR_INVALID_VALUE);
  Launch launch{mock_function, {}, threads};
  for (int i = 0; i < mock_function->arity; ++i) {
    // kernelParams[i] points at the argument's value, here a device pointer.
    CUdeviceptr pointer = *static_cast<const CUdeviceptr*>(params[i]);
    if (!in_allocation(pointer, 1)) return fail(CUDA_ERROR_INVALID_VALUE);
    launch.args.push_back(reinterpret_cast<void*>(pointer));
  }
  if (mock->capturing) {
    mock->captured.push_back(std::move(launch));
  } else {
    run({launch});
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  MOCK_ENTER();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (mock->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  *mock = MockStream{true, false, {}};
  ++state().stats.captures;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  MOCK_ENTER();
  MockStream* mock = find_stream(stream);
  if (mock == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!mock->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  bool invalidated = mock->invalidated;
  std::vector<Launch> captured = std::move(mock->captured);
  *mock = MockStream{};
  if (invalidated) {
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  auto* launches = new std::vector<Launch>(std::move(captured));
  state().graphs.insert(launches);
  *graph = reinterpret_cast<CUgraph>(launches);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                             unsigned long long flags) {
  MOCK_ENTER();
  auto* launches = reinterpret_cast<std::vector<Launch>*>(graph);
  if (!state().graphs.contains(launches) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* copy = new std::vector<Launch>(*launches);
  state().graph_execs.insert(copy);
  ++state().stats.instantiations;
  *exec = reinterpret_cast<CUgraphExec>(copy);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  auto* launches = reinterpret_cast<std::vector<Launch>*>(exec);
  if (!state().graph_execs.contains(launches)) return CUDA_ERROR_INVALID_VALUE;
  MockStream* mock = find_stream(stream);
  if (mock == nullptr || mock->capturing) return CUDA_ERROR_INVALID_HANDLE;
  ++state().stats.graph_launches;
  run(*launches);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  MOCK_ENTER();
  auto* launches = reinterpret_cast<std::vector<Launch>*>(graph);
  if (state().graphs.erase(launches) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete launches;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  MOCK_ENTER();
  auto* launches = reinterpret_cast<std::vector<Launch>*>(exec);
  if (state().graph_execs.erase(launches) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete launches;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int flags) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  if (event == nullptr || (flags != CU_EVENT_DEFAULT && flags != CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  *event = reinterpret_cast<CUevent>(new int(0));
  state().events.emplace(*event, std::nullopt);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  auto it = state().events.find(event);
  if (it == state().events.end() || find_stream(stream) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // Recording on a capturing stream would add a node to the graph; kiln never does that.
  if (find_stream(stream)->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  it->second = std::chrono::steady_clock::now();
  ++state().stats.event_records;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  return state().events.count(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
  MOCK_ENTER();
  MOCK_NEED_CONTEXT();
  auto a = state().events.find(start), b = state().events.find(end);
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (a == state().events.end() || b == state().events.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->second || !b->second) return CUDA_ERROR_INVALID_HANDLE;  // never recorded
  *milliseconds = std::chrono::duration<float, std::milli>(*b->second - *a->second).count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent event) {
  MOCK_ENTER();
  auto it = state().events.find(event);
  if (it == state().events.end()) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<int*>(event);
  state().events.erase(it);
  return CUDA_SUCCESS;
}

}  // extern "C"
