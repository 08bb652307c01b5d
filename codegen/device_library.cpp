#include "codegen/device_library.h"

#include <string>

namespace kiln::codegen {

extern const std::string_view kScalarMathText;  // scalar_math_text.cpp, generated

std::string scalar_math_library() {
  return "// ---- scalar functions of the op table (ir/scalar_math.h) ------------------------------\n"
         "#define KILN_SCALAR_FN __device__ __forceinline__\n" +
         std::string(kScalarMathText);
}

// Written once here rather than per kernel. Everything is __device__ __forceinline__ so that
// NVRTC inlines it; on the host the prelude turns those qualifiers into `inline`.
// f16 and bf16 are stored as 16-bit patterns and computed in float: the conversions use the
// PTX instruction on the GPU and _Float16 / bit arithmetic on the host, so no cuda_fp16.h is
// needed and both sides round to nearest even.
std::string_view device_library() {
  return R"(// ---- element types -------------------------------------------------------------------------
typedef unsigned short kiln_half;  // IEEE binary16 bits
typedef unsigned short kiln_bf16;  // bfloat16 bits

__device__ __forceinline__ float kiln_half_to_float(kiln_half h) {
#ifdef __CUDACC__
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return static_cast<float>(__builtin_bit_cast(_Float16, h));
#endif
}

__device__ __forceinline__ kiln_half kiln_float_to_half(float f) {
#ifdef __CUDACC__
  kiln_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return __builtin_bit_cast(kiln_half, static_cast<_Float16>(f));
#endif
}

__device__ __forceinline__ float kiln_bf16_to_float(kiln_bf16 b) {
  return __int_as_float(static_cast<int>(static_cast<unsigned int>(b) << 16));
}

__device__ __forceinline__ kiln_bf16 kiln_float_to_bf16(float f) {
  unsigned int bits = static_cast<unsigned int>(__float_as_int(f));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<kiln_bf16>((bits >> 16) | 0x40u);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<kiln_bf16>(bits >> 16);
}

// Float-to-integer conversion that saturates and maps NaN to 0, like the reference interpreter
// (a plain C cast is undefined out of range).
__device__ __forceinline__ int kiln_float_to_i32(float f) {
  if (f != f) return 0;
  if (f <= -2147483648.0f) return -2147483647 - 1;
  if (f >= 2147483648.0f) return 2147483647;
  return static_cast<int>(f);
}

__device__ __forceinline__ long long kiln_float_to_i64(float f) {
  if (f != f) return 0;
  if (f <= -9223372036854775808.0f) return -9223372036854775807LL - 1;
  if (f >= 9223372036854775808.0f) return 9223372036854775807LL;
  return static_cast<long long>(f);
}

// ---- math ----------------------------------------------------------------------------------
__device__ __forceinline__ float kiln_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float kiln_gelu_erf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));  // x * Phi(x)
}

__device__ __forceinline__ float kiln_gelu_tanh(float x) {
  const float kSqrt2OverPi = 0.79788456080286536f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// NaN-propagating max/min, as PyTorch's maximum/minimum and max pooling.
__device__ __forceinline__ float kiln_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float kiln_min(float a, float b) { return (a != a || a < b) ? a : b; }

// ---- tensor cores (sm_80+) -----------------------------------------------------------------
// f32 rounded to tf32 (10 mantissa bits) to nearest, ties away from zero: cvt.rna.tf32.f32,
// which is what the tensor cores expect their .tf32 operands to hold.
__device__ __forceinline__ float kiln_tf32_round(float x) {
#ifdef __CUDACC__
  unsigned int bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
#else
  unsigned int bits = static_cast<unsigned int>(__float_as_int(x));
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;  // not inf/NaN
  return __int_as_float(static_cast<int>(bits));
#endif
}

// d += a * b for one 16x8x8 tile held by the whole warp in the PTX ISA's fragment layouts
// ("Matrix Fragments for mma.m16n8k8"): a[4] and b[2] hold tf32 bit patterns, d[4] floats. On
// the host a warp collective computes the tile from every lane's fragments.
__device__ __forceinline__ void kiln_mma_tf32_m16n8k8(float* d, const unsigned int* a,
                                                      const unsigned int* b) {
#ifdef __CUDACC__
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  kiln_host_mma_tf32_m16n8k8(d, a, b);
#endif
}

// Two f32 values rounded to nearest even and packed as 16-bit operands of mma.m16n8k16: `lo` in
// the low half (the element with the smaller index), `hi` in the high half. cvt.rn.bf16x2.f32
// and cvt.rn.f16x2.f32 (sm_80+) take the high half's value first. A NaN becomes a NaN, an
// f16 past 65504 rounds to infinity, as the conversions do.
__device__ __forceinline__ unsigned int kiln_pack_bf16x2(float lo, float hi) {
#ifdef __CUDACC__
  unsigned int bits;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
  return bits;
#else
  return kiln_float_to_bf16(lo) | static_cast<unsigned int>(kiln_float_to_bf16(hi)) << 16;
#endif
}

__device__ __forceinline__ unsigned int kiln_pack_f16x2(float lo, float hi) {
#ifdef __CUDACC__
  unsigned int bits;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
  return bits;
#else
  return kiln_float_to_half(lo) | static_cast<unsigned int>(kiln_float_to_half(hi)) << 16;
#endif
}

// d += a * b for one 16x8x16 tile held by the whole warp in the PTX ISA's fragment layouts
// ("Matrix Fragments for mma.m16n8k16 with floating point type"): a[4] and b[2] hold two
// bf16 (or f16) values each, d[4] floats. On the host a warp collective computes the tile.
__device__ __forceinline__ void kiln_mma_bf16_m16n8k16(float* d, const unsigned int* a,
                                                       const unsigned int* b) {
#ifdef __CUDACC__
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  kiln_host_mma_16bit_m16n8k16(d, a, b, KILN_HOST_WARP_MMA_BF16_M16N8K16);
#endif
}

__device__ __forceinline__ void kiln_mma_f16_m16n8k16(float* d, const unsigned int* a,
                                                      const unsigned int* b) {
#ifdef __CUDACC__
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  kiln_host_mma_16bit_m16n8k16(d, a, b, KILN_HOST_WARP_MMA_F16_M16N8K16);
#endif
}

// Which of a 2:4 group's two kept values its element k (0..3) is, from the group's 4 bits of
// positions (ir/two_four.h: the first kept value's position low): 0 or 1, or -1 where the
// group holds a zero.
__device__ __forceinline__ int kiln_two_four_slot(unsigned int group_bits, int k) {
  return k == static_cast<int>(group_bits & 3u) ? 0 : k == static_cast<int>(group_bits >> 2 & 3u) ? 1 : -1;
}

// d += a * b for one 16x8x32 tile whose A (16 x 32) keeps at most 2 of every 4 consecutive
// elements of a row (2:4 sparse tensor cores, sparsity selector 0): a[4] holds A's 16 x 16 kept
// values in a dense m16n8k16's A layout, b[4] the 32 x 8 B (b[j]: k = 2t + 8j, 2t + 8j + 1 of
// column g), `metadata` the kept values' 2-bit positions within their groups (ir/two_four.h),
// read from lanes 4g and 4g + 1: rows g and g + 8, k 16 (lane % 4) .. + 15. ::ordered_metadata
// (PTX ISA 8.5): each group's two positions increase, as mma.sp is advised to be used.
__device__ __forceinline__ void kiln_mma_sp_bf16_m16n8k32(float* d, const unsigned int* a, const unsigned int* b,
                                                          unsigned int metadata) {
#ifdef __CUDACC__
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),
        "r"(metadata));
#else
  kiln_host_mma_sp_16bit_m16n8k32(d, a, b, metadata, KILN_HOST_WARP_MMA_SP_BF16_M16N8K32);
#endif
}

__device__ __forceinline__ void kiln_mma_sp_f16_m16n8k32(float* d, const unsigned int* a, const unsigned int* b,
                                                         unsigned int metadata) {
#ifdef __CUDACC__
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),
        "r"(metadata));
#else
  kiln_host_mma_sp_16bit_m16n8k32(d, a, b, metadata, KILN_HOST_WARP_MMA_SP_F16_M16N8K32);
#endif
}

// Four 8x8 matrices of 16-bit elements from shared memory (ldmatrix.x4), one row address per
// lane: lanes 8j .. 8j + 7 give the rows of matrix j, each 16 bytes, 16-byte aligned. Lane i
// receives in d[j] the 32 bits at row i / 4, word i % 4 of matrix j. For 32-bit data that is
// an 8 x 4 block, lane (g, t) = (i / 4, i % 4) getting element (g, t): the layout of an
// mma.m16n8k8 tf32 fragment when the block's rows run along k. On the host a warp collective
// gathers the words from every lane's row.
__device__ __forceinline__ void kiln_ldmatrix_x4(unsigned int* d, const void* row) {
#ifdef __CUDACC__
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(address));
#else
  kiln_host_ldmatrix_x4(d, row);
#endif
}

// ldmatrix.x4.trans: the same four matrices, each transposed as it loads. Lane i receives in
// d[j] the 16-bit elements i / 4 of rows 2 (i % 4) and 2 (i % 4) + 1 of matrix j (the lower
// row in the low half): a k-major tile of 16-bit values read as mma.m16n8k16's fragments.
__device__ __forceinline__ void kiln_ldmatrix_x4_trans(unsigned int* d, const void* row) {
#ifdef __CUDACC__
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(address));
#else
  kiln_host_ldmatrix_x4(d, row, KILN_HOST_WARP_LDMATRIX_X4_TRANS);
#endif
}

// ---- asynchronous copies (sm_80+) ---------------------------------------------------------
// 16 bytes from global to shared memory without passing through registers (cp.async, L2 only);
// with `valid` false the 16 bytes are zero-filled and the source is not read. Both addresses
// must be 16-byte aligned. The copies land only after kiln_cp_async_wait lets them: commit
// closes a group, wait<N> waits until at most N committed groups are still in flight.
__device__ __forceinline__ void kiln_cp_async16(void* shared_dst, const void* global_src,
                                                bool valid) {
#ifdef __CUDACC__
  const unsigned int dst = static_cast<unsigned int>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(global_src),
               "r"(valid ? 16 : 0));
#else
  kiln_host_cp_async(shared_dst, global_src, 16, valid ? 16 : 0);
#endif
}

__device__ __forceinline__ void kiln_cp_async_commit() {
#ifdef __CUDACC__
  asm volatile("cp.async.commit_group;" ::: "memory");
#else
  kiln_host_cp_async_commit();
#endif
}

template <int pending>
__device__ __forceinline__ void kiln_cp_async_wait() {
#ifdef __CUDACC__
  asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
#else
  kiln_host_cp_async_wait(pending);
#endif
}

// ---- warp reductions (full warp, all 32 lanes active) ------------------------------------------
__device__ __forceinline__ float kiln_warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float kiln_warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = kiln_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
)";
}

}  // namespace kiln::codegen
