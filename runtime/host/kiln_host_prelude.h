// kiln_host_prelude.h: the CUDA built-ins on the CPU, for kiln's host backend.
//
// The generated translation unit includes this file when __CUDACC__ is not defined; the host
// C++ compiler (g++ -std=c++17) builds it into a shared object that runtime/host/ loads with
// dlopen and runs block by block. The file is self-contained (kiln writes it next to the source
// it compiles) and its text is hashed into every host cache key, so any edit rebuilds.
//
// Part 1 is the C ABI between that shared object and the runtime; the runtime includes only
// that part (KILN_HOST_ABI_ONLY), so the shared object needs no symbol from the kiln binary:
//   - the .so exports kiln_host_tls(): the address of its thread_local "current GPU thread"
//     pointer. A worker OS thread runs one block at a time (all its fibers on that OS thread)
//     and stores the running GPU thread's kiln_host_thread there before resuming it.
//   - kiln_host_thread carries threadIdx, the block's description (blockIdx, dims, the shared
//     arena) and a table of runtime functions: block barriers and warp collectives, which may
//     switch fibers and may throw (strict mode, deadlock), so nothing here is noexcept.
// Part 2 maps CUDA's qualifiers, built-in variables, intrinsics, atomics and vector types onto
// that ABI and the C++ standard library. Semantics follow the CUDA C++ Programming Guide.
#ifndef KILN_HOST_PRELUDE_H
#define KILN_HOST_PRELUDE_H

// ---- part 1: the C ABI (bump the version on any layout or meaning change) ----------------------
#define KILN_HOST_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_host_uint3 {
  unsigned int x, y, z;
} kiln_host_uint3;

// One running block, shared by its threads.
typedef struct kiln_host_block {
  kiln_host_uint3 block_idx;
  kiln_host_uint3 block_dim;
  kiln_host_uint3 grid_dim;
  unsigned char* smem;      // the dynamic shared arena (kiln_smem), 128-byte aligned
  unsigned int smem_bytes;  // its size as launched
  // Nonzero: run the CUDA body of a kernel that also has a host-specific one (kiln_host_variant).
  int cuda_variants;
} kiln_host_block;

// Barrier flavours: __syncthreads and its reducing variants.
enum {
  KILN_HOST_BARRIER_SYNC = 0,
  KILN_HOST_BARRIER_COUNT = 1,
  KILN_HOST_BARRIER_AND = 2,
  KILN_HOST_BARRIER_OR = 3
};

// Warp collectives. `operand` is the source lane / delta / lane mask of a shuffle.
enum {
  KILN_HOST_WARP_SHFL_IDX = 0,
  KILN_HOST_WARP_SHFL_UP = 1,
  KILN_HOST_WARP_SHFL_DOWN = 2,
  KILN_HOST_WARP_SHFL_XOR = 3,
  KILN_HOST_WARP_BALLOT = 4,
  KILN_HOST_WARP_ANY = 5,
  KILN_HOST_WARP_ALL = 6,
  KILN_HOST_WARP_SYNC = 7,
  KILN_HOST_WARP_REDUCE_ADD = 8,
  KILN_HOST_WARP_REDUCE_MIN_I32 = 9,
  KILN_HOST_WARP_REDUCE_MAX_I32 = 10,
  KILN_HOST_WARP_REDUCE_MIN_U32 = 11,
  KILN_HOST_WARP_REDUCE_MAX_U32 = 12,
  KILN_HOST_WARP_REDUCE_AND = 13,
  KILN_HOST_WARP_REDUCE_OR = 14,
  KILN_HOST_WARP_REDUCE_XOR = 15,
  // Tensor-core matrix multiply-accumulate, mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32:
  // the value is a kiln_host_mma_fragments* of the lane.
  KILN_HOST_WARP_MMA_TF32_M16N8K8 = 16,
  // ldmatrix.sync.aligned.m8n8.x4.shared.b16: the value is a kiln_host_ldmatrix* of the lane.
  KILN_HOST_WARP_LDMATRIX_X4 = 17,
  // mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: the value is a
  // kiln_host_mma_fragments* of the lane, whose a[4] and b[2] hold two 16-bit values each.
  KILN_HOST_WARP_MMA_BF16_M16N8K16 = 18,
  KILN_HOST_WARP_MMA_F16_M16N8K16 = 19,
  // ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: as KILN_HOST_WARP_LDMATRIX_X4, each 8 x 8
  // matrix of 16-bit elements transposed.
  KILN_HOST_WARP_LDMATRIX_X4_TRANS = 20,
  // mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with
  // sparsity selector 0: the value is a kiln_host_mma_sp_fragments* of the lane.
  KILN_HOST_WARP_MMA_SP_BF16_M16N8K32 = 21,
  KILN_HOST_WARP_MMA_SP_F16_M16N8K32 = 22
};

// One lane's part of an ldmatrix.x4: the row it points at (16 bytes of matrix lane / 8, row
// lane % 8) and where its four 32-bit results go.
typedef struct kiln_host_ldmatrix {
  const void* row;
  unsigned int* d;
} kiln_host_ldmatrix;

// One lane's fragments of an mma.sync (the PTX ISA's layouts, "Matrix Fragments for
// mma.m16n8k8" and "for mma.m16n8k16"): a[4] and b[2] are .tf32 bit patterns or pairs of
// .bf16/.f16 ones, d[4] the accumulators, read as C and
// overwritten with D.
typedef struct kiln_host_mma_fragments {
  const unsigned int* a;
  const unsigned int* b;
  float* d;
} kiln_host_mma_fragments;

// One lane's fragments of a sparse mma.sp m16n8k32 on 16-bit operands (the PTX ISA's "Sparse
// matrix storage" and "Matrix fragments for multiply-accumulate operation with sparse matrix
// A"): a[4] holds A's kept values in the layout of a dense m16n8k16's A, b[4] two 16-bit values
// each of the 32 x 8 B, d[4] the accumulators, and `metadata` the 2-bit positions of A's kept
// values (read from the lanes the sparsity selector names).
typedef struct kiln_host_mma_sp_fragments {
  const unsigned int* a;
  const unsigned int* b;
  float* d;
  unsigned int metadata;
} kiln_host_mma_sp_fragments;

struct kiln_host_thread;

typedef struct kiln_host_ops {
  // Waits until every thread of the block arrives; returns the reduced predicate for the
  // COUNT/AND/OR flavours. `line`: the call site, for strict mode's same-barrier check.
  int (*barrier)(struct kiln_host_thread* self, int op, int predicate, int line);
  // Posts this lane's value, waits for every lane of `mask`, returns this lane's result.
  unsigned long long (*warp)(struct kiln_host_thread* self, int op, unsigned int mask,
                             unsigned long long value, int operand, int width, int line);
} kiln_host_ops;

// One GPU thread, owned by the runtime.
typedef struct kiln_host_thread {
  kiln_host_uint3 thread_idx;
  const kiln_host_block* block;
  const kiln_host_ops* ops;
  void* runtime;  // opaque to the prelude
} kiln_host_thread;

#ifdef __cplusplus
}  // extern "C"
#endif

#ifndef KILN_HOST_ABI_ONLY
// ---- part 2: CUDA built-ins ----------------------------------------------------------------
// Standard headers first: the qualifier macros below (__noinline__ in particular) must not
// reach library headers.
// C headers and <exception>/<new> only: every host module compile parses these, and <string>,
// <vector> and the containers cost more than a small module's own code (g++ 12 at -O3: 0.47 s
// for the headers alone with them, 0.2 s without).
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <math.h>  // expf, sqrtf, ... in the global namespace, as CUDA has them

// The current GPU thread of this OS thread (see part 1). `static`: one TU includes this.
static thread_local kiln_host_thread* kiln_host_current = nullptr;

extern "C" __attribute__((visibility("default"))) kiln_host_thread** kiln_host_tls(void) {
  return &kiln_host_current;
}
extern "C" __attribute__((visibility("default"))) int kiln_host_abi_version(void) {
  return KILN_HOST_ABI_VERSION;
}

// Qualifiers. `inline` must appear once, so only __forceinline__ carries it.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ __attribute__((always_inline)) inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Static __shared__ variables: one copy per OS thread is one per running block (a worker runs
// one block at a time). Not poisoned: kiln's codegen uses the kiln_smem arena instead.
// `extern __shared__` has no host equivalent and fails to compile, on purpose.
#define __shared__ static thread_local

// ---- built-in variables ---------------------------------------------------------------------
typedef kiln_host_uint3 uint3;
struct dim3 {
  unsigned int x, y, z;
  dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  operator uint3() const { return uint3{x, y, z}; }
};
static const int warpSize = 32;

#define threadIdx (kiln_host_current->thread_idx)
#define blockIdx (kiln_host_current->block->block_idx)
#define blockDim (kiln_host_current->block->block_dim)
#define gridDim (kiln_host_current->block->grid_dim)
// The block's dynamic shared arena (see codegen/kernel_emitter.h).
#define kiln_smem (kiln_host_current->block->smem)
// True when a kernel with a host-specific body (codegen::Kernel::host_variant) runs that body;
// false when the runtime asked for the CUDA one (HostOptions::cuda_variants).
#define kiln_host_variant() (kiln_host_current->block->cuda_variants == 0)

// ---- block barriers -------------------------------------------------------------------------
// __builtin_LINE() as a default argument is the caller's line: strict mode compares it.
static inline int kiln_host_barrier(int op, int predicate, int line) {
  kiln_host_thread* self = kiln_host_current;
  return self->ops->barrier(self, op, predicate, line);
}
static inline void __syncthreads(int line = __builtin_LINE()) {
  kiln_host_barrier(KILN_HOST_BARRIER_SYNC, 1, line);
}
static inline int __syncthreads_count(int p, int line = __builtin_LINE()) {
  return kiln_host_barrier(KILN_HOST_BARRIER_COUNT, p != 0, line);
}
static inline int __syncthreads_and(int p, int line = __builtin_LINE()) {
  return kiln_host_barrier(KILN_HOST_BARRIER_AND, p != 0, line);
}
static inline int __syncthreads_or(int p, int line = __builtin_LINE()) {
  return kiln_host_barrier(KILN_HOST_BARRIER_OR, p != 0, line);
}

// Fibers switch only at barriers and collectives, so memory is always coherent within a block;
// across blocks (worker OS threads) a fence is a real one.
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// ---- warp collectives -----------------------------------------------------------------------
static inline unsigned long long kiln_host_warp(int op, unsigned int mask, unsigned long long v,
                                                int operand, int width, int line) {
  kiln_host_thread* self = kiln_host_current;
  return self->ops->warp(self, op, mask, v, operand, width, line);
}
template <typename T>
static inline unsigned long long kiln_host_to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp collectives move at most 64 bits");
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
static inline T kiln_host_from_bits(unsigned long long bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

static inline void __syncwarp(unsigned int mask = 0xffffffffu, int line = __builtin_LINE()) {
  kiln_host_warp(KILN_HOST_WARP_SYNC, mask, 0, 0, 32, line);
}
static inline unsigned int __ballot_sync(unsigned int mask, int p, int line = __builtin_LINE()) {
  return static_cast<unsigned int>(
      kiln_host_warp(KILN_HOST_WARP_BALLOT, mask, p != 0, 0, 32, line));
}
static inline int __any_sync(unsigned int mask, int p, int line = __builtin_LINE()) {
  return static_cast<int>(kiln_host_warp(KILN_HOST_WARP_ANY, mask, p != 0, 0, 32, line));
}
static inline int __all_sync(unsigned int mask, int p, int line = __builtin_LINE()) {
  return static_cast<int>(kiln_host_warp(KILN_HOST_WARP_ALL, mask, p != 0, 0, 32, line));
}

// d += a * b for one m16n8k8 tile, a warp collective of all 32 lanes
// (runtime/host/warp_collective.cpp computes it from every lane's fragments).
static inline void kiln_host_mma_tf32_m16n8k8(float* d, const unsigned int* a, const unsigned int* b,
                                              int line = __builtin_LINE()) {
  kiln_host_mma_fragments fragments = {a, b, d};
  kiln_host_warp(KILN_HOST_WARP_MMA_TF32_M16N8K8, 0xffffffffu,
                 reinterpret_cast<unsigned long long>(&fragments), 0, 32, line);
}

// d += a * b for one m16n8k16 tile of bf16 or f16 operands (`op`), a warp collective of all
// 32 lanes.
static inline void kiln_host_mma_16bit_m16n8k16(float* d, const unsigned int* a, const unsigned int* b,
                                                int op, int line = __builtin_LINE()) {
  kiln_host_mma_fragments fragments = {a, b, d};
  kiln_host_warp(op, 0xffffffffu, reinterpret_cast<unsigned long long>(&fragments), 0, 32, line);
}

// d += a * b for one m16n8k32 tile whose A is 2:4 sparse (a: its kept values, `metadata`: their
// positions), bf16 or f16 operands (`op`), a warp collective of all 32 lanes.
static inline void kiln_host_mma_sp_16bit_m16n8k32(float* d, const unsigned int* a, const unsigned int* b,
                                                   unsigned int metadata, int op,
                                                   int line = __builtin_LINE()) {
  kiln_host_mma_sp_fragments fragments = {a, b, d, metadata};
  kiln_host_warp(op, 0xffffffffu, reinterpret_cast<unsigned long long>(&fragments), 0, 32, line);
}

// ldmatrix.x4 (`op`: plain or .trans), a warp collective of all 32 lanes
// (runtime/host/warp_collective.cpp).
static inline void kiln_host_ldmatrix_x4(unsigned int* d, const void* row, int op = KILN_HOST_WARP_LDMATRIX_X4,
                                         int line = __builtin_LINE()) {
  kiln_host_ldmatrix request = {row, d};
  kiln_host_warp(op, 0xffffffffu, reinterpret_cast<unsigned long long>(&request), 0, 32, line);
}

// Overloads for exactly the types CUDA has, so the host accepts what NVRTC accepts.
#define KILN_HOST_SHUFFLES(T)                                                                      \
  static inline T __shfl_sync(unsigned int mask, T v, int src, int width = 32,                     \
                              int line = __builtin_LINE()) {                                       \
    return kiln_host_from_bits<T>(kiln_host_warp(KILN_HOST_WARP_SHFL_IDX, mask,                    \
                                                 kiln_host_to_bits(v), src, width, line));         \
  }                                                                                                \
  static inline T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32,       \
                                 int line = __builtin_LINE()) {                                    \
    return kiln_host_from_bits<T>(kiln_host_warp(KILN_HOST_WARP_SHFL_UP, mask,                     \
                                                 kiln_host_to_bits(v), (int)delta, width, line));  \
  }                                                                                                \
  static inline T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32,     \
                                   int line = __builtin_LINE()) {                                  \
    return kiln_host_from_bits<T>(kiln_host_warp(KILN_HOST_WARP_SHFL_DOWN, mask,                   \
                                                 kiln_host_to_bits(v), (int)delta, width, line));  \
  }                                                                                                \
  static inline T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32,           \
                                  int line = __builtin_LINE()) {                                   \
    return kiln_host_from_bits<T>(kiln_host_warp(KILN_HOST_WARP_SHFL_XOR, mask,                    \
                                                 kiln_host_to_bits(v), lane_mask, width, line));   \
  }
KILN_HOST_SHUFFLES(int)
KILN_HOST_SHUFFLES(unsigned int)
KILN_HOST_SHUFFLES(long)
KILN_HOST_SHUFFLES(unsigned long)
KILN_HOST_SHUFFLES(long long)
KILN_HOST_SHUFFLES(unsigned long long)
KILN_HOST_SHUFFLES(float)
KILN_HOST_SHUFFLES(double)
#undef KILN_HOST_SHUFFLES

#define KILN_HOST_WARP_REDUCE(NAME, T, OP)                                                         \
  static inline T NAME(unsigned int mask, T v, int line = __builtin_LINE()) {                      \
    return static_cast<T>(kiln_host_warp(OP, mask, static_cast<unsigned int>(v), 0, 32, line));    \
  }
KILN_HOST_WARP_REDUCE(__reduce_add_sync, int, KILN_HOST_WARP_REDUCE_ADD)
KILN_HOST_WARP_REDUCE(__reduce_add_sync, unsigned int, KILN_HOST_WARP_REDUCE_ADD)
KILN_HOST_WARP_REDUCE(__reduce_min_sync, int, KILN_HOST_WARP_REDUCE_MIN_I32)
KILN_HOST_WARP_REDUCE(__reduce_min_sync, unsigned int, KILN_HOST_WARP_REDUCE_MIN_U32)
KILN_HOST_WARP_REDUCE(__reduce_max_sync, int, KILN_HOST_WARP_REDUCE_MAX_I32)
KILN_HOST_WARP_REDUCE(__reduce_max_sync, unsigned int, KILN_HOST_WARP_REDUCE_MAX_U32)
KILN_HOST_WARP_REDUCE(__reduce_and_sync, unsigned int, KILN_HOST_WARP_REDUCE_AND)
KILN_HOST_WARP_REDUCE(__reduce_or_sync, unsigned int, KILN_HOST_WARP_REDUCE_OR)
KILN_HOST_WARP_REDUCE(__reduce_xor_sync, unsigned int, KILN_HOST_WARP_REDUCE_XOR)
#undef KILN_HOST_WARP_REDUCE

// ---- atomics (relaxed, like CUDA's; real atomics because blocks run in parallel) ------------
#define KILN_HOST_ATOMIC_INT(T)                                                                   \
  static inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }    \
  static inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }  \
  static inline T atomicCAS(T* p, T expected, T desired) {                                        \
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
    return expected;                                                                              \
  }                                                                                               \
  static inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }    \
  static inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }      \
  static inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }
#define KILN_HOST_ATOMIC_MINMAX(T)                                                               \
  static inline T atomicMax(T* p, T v) {                                                         \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                \
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED,           \
                                                   __ATOMIC_RELAXED)) {                          \
    }                                                                                            \
    return old;                                                                                  \
  }                                                                                              \
  static inline T atomicMin(T* p, T v) {                                                         \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                \
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED,           \
                                                   __ATOMIC_RELAXED)) {                          \
    }                                                                                            \
    return old;                                                                                  \
  }
KILN_HOST_ATOMIC_INT(int)
KILN_HOST_ATOMIC_INT(unsigned int)
KILN_HOST_ATOMIC_INT(unsigned long long)
KILN_HOST_ATOMIC_MINMAX(int)
KILN_HOST_ATOMIC_MINMAX(unsigned int)
KILN_HOST_ATOMIC_MINMAX(long long)
KILN_HOST_ATOMIC_MINMAX(unsigned long long)
#undef KILN_HOST_ATOMIC_INT
#undef KILN_HOST_ATOMIC_MINMAX
static inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicSub(unsigned int* p, unsigned int v) {
  return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
}

// Floating-point atomics: a compare-and-swap loop on the bits.
template <typename F, typename U, typename Op>
static inline F kiln_host_atomic_float(F* p, Op op) {
  U* bits = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    const U desired = kiln_host_from_bits<U>(kiln_host_to_bits(op(kiln_host_from_bits<F>(old))));
    if (__atomic_compare_exchange_n(bits, &old, desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return kiln_host_from_bits<F>(old);
  }
}
static inline float atomicAdd(float* p, float v) {
  return kiln_host_atomic_float<float, unsigned int>(p, [v](float x) { return x + v; });
}
static inline double atomicAdd(double* p, double v) {
  return kiln_host_atomic_float<double, unsigned long long>(p, [v](double x) { return x + v; });
}
static inline float atomicExch(float* p, float v) {
  unsigned int* bits = reinterpret_cast<unsigned int*>(p);
  const unsigned int desired = static_cast<unsigned int>(kiln_host_to_bits(v));
  return kiln_host_from_bits<float>(__atomic_exchange_n(bits, desired, __ATOMIC_RELAXED));
}

// ---- errors raised by the kernel's own code --------------------------------------------------
// A misaligned cp.async, too many copies in flight: a std::exception, so the runtime reports
// what() as for its own errors, without <string> in every module.
struct kiln_host_error : std::exception {
  char text[256];
  const char* what() const noexcept override { return text; }
};
template <typename... Args>
[[noreturn]] static inline void kiln_host_fail(const char* format, Args... args) {
  kiln_host_error error;
  snprintf(error.text, sizeof error.text, format, args...);
  throw error;
}

// ---- asynchronous copies (cp.async) ----------------------------------------------------------
// As the PTX ISA defines them: a copy issued now is only guaranteed to have landed once a later
// cp.async.wait_group lets it. Each GPU thread keeps its copies in groups: commit closes the
// open group, and wait(N) performs every committed group but the newest N, oldest first. So a
// kernel that reads shared memory before waiting reads what was there (the poisoned arena: NaN),
// as it could on the GPU. The state lives per GPU thread of the running block (a worker runs
// one block at a time) and is dropped when another block's thread reuses the slot.
//
// Capacity per GPU thread: copies in flight (the open group and the committed groups not yet
// performed), and committed groups. kiln's GEMM template issues at most 4 copies per thread per
// stage (128 x 16 tiles of A and B, 256 threads), 3 stages deep.
enum { KILN_HOST_ASYNC_MAX_COPIES = 64, KILN_HOST_ASYNC_MAX_GROUPS = 16 };
struct kiln_host_async_copy {
  void* dst;
  const void* src;
  unsigned int bytes, src_bytes;  // src_bytes < bytes: the rest is zero-filled
};
struct kiln_host_async_state {
  const kiln_host_block* block;
  kiln_host_uint3 block_idx;
  unsigned int count;   // copies[0, count): the committed groups, oldest first, then the open one
  unsigned int groups;  // committed groups; group_end[g] is where group g ends in copies
  unsigned int group_end[KILN_HOST_ASYNC_MAX_GROUPS];
  kiln_host_async_copy copies[KILN_HOST_ASYNC_MAX_COPIES];
};
// Each worker OS thread keeps one state per GPU thread of its block, by linear thread index,
// grown to the largest block it has run (calloc: all zero is the empty state).
struct kiln_host_async_table {
  kiln_host_async_state* states = nullptr;
  unsigned int capacity = 0;
  ~kiln_host_async_table() { free(states); }
};
static inline kiln_host_async_state& kiln_host_async_of_current() {
  static thread_local kiln_host_async_table table;
  const kiln_host_thread* thread = kiln_host_current;
  const kiln_host_block* block = thread->block;
  const kiln_host_uint3 dim = block->block_dim;
  const unsigned int threads = dim.x * dim.y * dim.z;
  if (table.capacity < threads) {
    void* grown = calloc(threads, sizeof(kiln_host_async_state));
    if (grown == nullptr) throw std::bad_alloc();
    free(table.states);  // a larger block starts: whatever the smaller one left is its own
    table.states = static_cast<kiln_host_async_state*>(grown);
    table.capacity = threads;
  }
  const kiln_host_uint3 tid = thread->thread_idx;
  kiln_host_async_state& state = table.states[tid.x + dim.x * (tid.y + dim.y * tid.z)];
  const kiln_host_uint3 idx = block->block_idx;
  if (state.block != block || state.block_idx.x != idx.x || state.block_idx.y != idx.y ||
      state.block_idx.z != idx.z) {
    state.block = block;
    state.block_idx = idx;
    state.count = state.groups = 0;
  }
  return state;
}
static inline void kiln_host_cp_async(void* dst, const void* src, unsigned int bytes,
                                      unsigned int src_bytes) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & (bytes - 1)) != 0)
    kiln_host_fail("cp.async of %u bytes from or to an address not aligned to %u", bytes, bytes);
  kiln_host_async_state& state = kiln_host_async_of_current();
  if (state.count == KILN_HOST_ASYNC_MAX_COPIES)
    kiln_host_fail("more than %d cp.async copies in flight in one GPU thread (the host backend's "
                   "limit): wait for some first",
                   int(KILN_HOST_ASYNC_MAX_COPIES));
  state.copies[state.count++] = {dst, src, bytes, src_bytes};
}
static inline void kiln_host_cp_async_commit() {
  kiln_host_async_state& state = kiln_host_async_of_current();
  if (state.groups == KILN_HOST_ASYNC_MAX_GROUPS)
    kiln_host_fail("more than %d cp.async groups committed and not waited for in one GPU thread "
                   "(the host backend's limit)",
                   int(KILN_HOST_ASYNC_MAX_GROUPS));
  state.group_end[state.groups++] = state.count;  // an empty group is a group too
}
static inline void kiln_host_cp_async_wait(int pending) {
  kiln_host_async_state& state = kiln_host_async_of_current();
  if (state.groups <= static_cast<unsigned int>(pending)) return;
  // Perform the oldest groups, then move what stays (the newest `pending` groups and the open
  // one) to the front.
  const unsigned int performed = state.groups - static_cast<unsigned int>(pending);
  const unsigned int done = state.group_end[performed - 1];
  for (unsigned int i = 0; i < done; ++i) {
    const kiln_host_async_copy& copy = state.copies[i];
    memcpy(copy.dst, copy.src, copy.src_bytes);
    memset(static_cast<char*>(copy.dst) + copy.src_bytes, 0, copy.bytes - copy.src_bytes);
  }
  memmove(state.copies, state.copies + done, (state.count - done) * sizeof(kiln_host_async_copy));
  state.count -= done;
  for (unsigned int g = performed; g < state.groups; ++g)
    state.group_end[g - performed] = state.group_end[g] - done;
  state.groups -= performed;
}

// ---- memory, bits and conversions -----------------------------------------------------------
template <typename T>
static inline T __ldg(const T* p) { return *p; }

static inline float __int_as_float(int v) {
  return kiln_host_from_bits<float>(static_cast<unsigned int>(v));
}
static inline int __float_as_int(float v) { return static_cast<int>(kiln_host_to_bits(v)); }
static inline float __uint_as_float(unsigned int v) { return kiln_host_from_bits<float>(v); }
static inline unsigned int __float_as_uint(float v) {
  return static_cast<unsigned int>(kiln_host_to_bits(v));
}
static inline double __longlong_as_double(long long v) {
  return kiln_host_from_bits<double>(static_cast<unsigned long long>(v));
}
static inline long long __double_as_longlong(double v) {
  return static_cast<long long>(kiln_host_to_bits(v));
}

static inline int __popc(unsigned int v) { return __builtin_popcount(v); }
static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
static inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(v)); }
static inline int __clzll(long long v) {
  return v == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(v));
}
static inline int __ffs(int v) { return __builtin_ffs(v); }
static inline int __ffsll(long long v) { return __builtin_ffsll(v); }
static inline unsigned int __brev(unsigned int v) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}
static inline int __mulhi(int a, int b) {
  return static_cast<int>((static_cast<long long>(a) * b) >> 32);
}
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}

// Rounding conversions (the default floating-point environment rounds to nearest even).
static inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
static inline int __float2int_rz(float x) { return static_cast<int>(x); }
static inline int __float2int_rd(float x) { return static_cast<int>(floorf(x)); }
static inline int __float2int_ru(float x) { return static_cast<int>(ceilf(x)); }
static inline float __int2float_rn(int x) { return static_cast<float>(x); }

// ---- math -----------------------------------------------------------------------------------
// Fast-math intrinsics are computed exactly here: the GPU's are approximations, so tests
// compare them with a tolerance anyway. <math.h> provides expf, logf, tanhf, erff, fmaf, ...
// glibc declares __expf, __sinf, ... itself (as aliases of expf, sinf): rename ours.
#define KILN_HOST_FAST(NAME, EXPR)                                        \
  static inline float kiln_host##NAME(float x) { return EXPR; }
KILN_HOST_FAST(__expf, expf(x))
KILN_HOST_FAST(__exp10f, powf(10.0f, x))
KILN_HOST_FAST(__logf, logf(x))
KILN_HOST_FAST(__log2f, log2f(x))
KILN_HOST_FAST(__log10f, log10f(x))
KILN_HOST_FAST(__sinf, sinf(x))
KILN_HOST_FAST(__cosf, cosf(x))
KILN_HOST_FAST(__tanf, tanf(x))
KILN_HOST_FAST(__tanhf, tanhf(x))
#undef KILN_HOST_FAST
static inline float kiln_host__powf(float x, float y) { return powf(x, y); }
#define __expf kiln_host__expf
#define __exp10f kiln_host__exp10f
#define __logf kiln_host__logf
#define __log2f kiln_host__log2f
#define __log10f kiln_host__log10f
#define __sinf kiln_host__sinf
#define __cosf kiln_host__cosf
#define __tanf kiln_host__tanf
#define __tanhf kiln_host__tanhf
#define __powf kiln_host__powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fsub_rn(float x, float y) { return x - y; }
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fdiv_rn(float x, float y) { return x / y; }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
// NaN saturates to 0, as on the GPU.
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }

// CUDA's min/max overloads, mixed signedness included (the unsigned type wins).
#define KILN_HOST_MINMAX(R, A, B)                                     \
  static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; } \
  static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
KILN_HOST_MINMAX(int, int, int)
KILN_HOST_MINMAX(unsigned int, unsigned int, unsigned int)
KILN_HOST_MINMAX(unsigned int, int, unsigned int)
KILN_HOST_MINMAX(unsigned int, unsigned int, int)
KILN_HOST_MINMAX(long, long, long)
KILN_HOST_MINMAX(unsigned long, unsigned long, unsigned long)
KILN_HOST_MINMAX(long long, long long, long long)
KILN_HOST_MINMAX(unsigned long long, unsigned long long, unsigned long long)
KILN_HOST_MINMAX(unsigned long long, long long, unsigned long long)
KILN_HOST_MINMAX(unsigned long long, unsigned long long, long long)
#undef KILN_HOST_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(float a, double b) { return fmin(a, b); }
static inline double max(float a, double b) { return fmax(a, b); }
static inline double min(double a, float b) { return fmin(a, b); }
static inline double max(double a, float b) { return fmax(a, b); }

// ---- vector types, aligned as in CUDA's vector_types.h ----------------------------------------
#define KILN_HOST_VEC1(T, N, A) \
  struct __attribute__((aligned(A))) N##1 { T x; };                                             \
  static inline N##1 make_##N##1(T x) { return N##1{x}; }
#define KILN_HOST_VEC2(T, N, A) \
  struct __attribute__((aligned(A))) N##2 { T x, y; };                                          \
  static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define KILN_HOST_VEC3(T, N) \
  struct N##3 { T x, y, z; };                                                                   \
  static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define KILN_HOST_VEC4(T, N, A) \
  struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                                    \
  static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
KILN_HOST_VEC1(float, float, 4)
KILN_HOST_VEC2(float, float, 8)
KILN_HOST_VEC3(float, float)
KILN_HOST_VEC4(float, float, 16)
KILN_HOST_VEC1(int, int, 4)
KILN_HOST_VEC2(int, int, 8)
KILN_HOST_VEC3(int, int)
KILN_HOST_VEC4(int, int, 16)
KILN_HOST_VEC1(unsigned int, uint, 4)
KILN_HOST_VEC2(unsigned int, uint, 8)
KILN_HOST_VEC4(unsigned int, uint, 16)
static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) {
  return uint3{x, y, z};
}
KILN_HOST_VEC2(short, short, 4)
KILN_HOST_VEC4(short, short, 8)
KILN_HOST_VEC2(unsigned short, ushort, 4)
KILN_HOST_VEC4(unsigned short, ushort, 8)
KILN_HOST_VEC2(signed char, char, 2)
KILN_HOST_VEC4(signed char, char, 4)
KILN_HOST_VEC2(unsigned char, uchar, 2)
KILN_HOST_VEC4(unsigned char, uchar, 4)
KILN_HOST_VEC2(double, double, 16)
KILN_HOST_VEC2(long long, longlong, 16)
KILN_HOST_VEC2(unsigned long long, ulonglong, 16)
#undef KILN_HOST_VEC1
#undef KILN_HOST_VEC2
#undef KILN_HOST_VEC3
#undef KILN_HOST_VEC4

// ---- the GEMM template's host body (codegen/kernels/gemm_host.cpp) ---------------------------
// In kiln_host_gemm.h, which CMake pastes here when it embeds the prelude (one text, one file
// next to each compiled source); only generated kernels, never the ABI-only users, see it.
#include "kiln_host_gemm.h"

#endif  // KILN_HOST_ABI_ONLY
#endif  // KILN_HOST_PRELUDE_H
