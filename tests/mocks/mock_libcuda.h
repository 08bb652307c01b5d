// A mock libcuda for the unit tests: a shared library that exports the versioned driver
// functions kiln resolves (driver_api.h), so the whole CUDA backend runs without a GPU.
//
// Device memory is host memory (a CUdeviceptr is a host address), copies are memcpy, and a
// kernel is a host function registered under its name, called once per launch with the
// argument pointers read through the kernelParams array, as the driver reads them. Streams run
// synchronously; a capture records launches, and a graph replays them. The mock checks what a
// driver checks and kiln could get wrong: a current context for every call that needs one,
// copies inside one allocation, the dynamic shared memory limit, launches only on a stream
// that is not capturing elsewhere. Tests control it through the kiln_mock_* functions below.
#pragma once

#include <cuda.h>

extern "C" {

struct KilnMockConfig {
  int device_count = 1;
  int major = 9;  // compute capability
  int minor = 0;
  int optin_shared_bytes = 227 * 1024;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
};

struct KilnMockStats {
  int context_references = 0;  // primary context retains not yet released
  int modules = 0;             // live handles of each kind
  int streams = 0;
  int allocations = 0;
  int graphs = 0;
  int graph_execs = 0;
  int captures = 0;            // cuStreamBeginCapture calls
  int instantiations = 0;
  int graph_launches = 0;
  int kernel_runs = 0;         // kernels executed (directly or by a graph)
  int events = 0;              // live events
  int event_records = 0;
  int event_waits = 0;         // cuStreamWaitEvent calls
  int pinned_allocations = 0;  // live cuMemHostAlloc blocks
  int pinned_uploads = 0;      // host-to-device copies from pinned memory
  int pageable_uploads = 0;    // ... and from pageable memory
  int pinned_downloads = 0;    // device-to-host copies into pinned memory
  int pageable_downloads = 0;
  bool capturing = false;      // some stream is still capturing
  bool loaded_ptx = false;     // the last module loaded was PTX (else a cubin)
};

// Runs one launch: `args` are the kernel's pointer arguments, `threads` is grid x block.
typedef void (*KilnMockKernel)(void* const* args, unsigned long long threads);

// Frees every live handle, forgets every registration and sets the device. Safe between
// tests only when the previous test destroyed its executables.
void kiln_mock_reset(const KilnMockConfig* config);
void kiln_mock_register_kernel(const char* name, int arity, KilnMockKernel kernel);
// The next call of `symbol` (e.g. "cuMemAlloc_v2") returns `result` without doing anything.
void kiln_mock_fail_next(const char* symbol, CUresult result);
void kiln_mock_stats(KilnMockStats* stats);

}  // extern "C"
