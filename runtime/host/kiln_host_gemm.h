// The GEMM template's host-body multiplies (codegen/kernels/gemm_host.cpp), part of the host
// prelude: runtime/host/CMakeLists.txt pastes this file in place of the prelude's include of it
// when it embeds the prelude's text, so it is never compiled on its own (it uses the prelude's
// fma and vector types).
// Multiplies a staged panel into a block's result tile: acc[r][c] += sum over the panel's k of
// a[k][r] * b[k][c] (a's element at k * a_k_stride + r * a_row_stride, b's at k * b_stride + c),
// 4 rows x 16 columns at a time held in registers, k in order, one fused multiply-add at a time
// as the CUDA body's fma(), so each sum is the CUDA body's. The panel holds `steps` k steps of
// `tile_k`; the last has `last_k` valid k, and when that is fewer than tile_k, the CUDA body's
// products of the zero padding are folded into one +0 (the only one that can change a sum:
// -0 + +0 is +0). `rows` and `cols` (multiples of 4 and 16) cover the results inside the
// matrix. One copy per element type in a module, not one per kernel: it is
// most of a GEMM's host code, and half a training step's compile time when inlined everywhere.
//
// With AVX and FMA the columns go in vectors, written out: g++ does not vectorize fma() calls
// at -O2 (-O3 barely), and scalar FMAs ran ResNet-18 3.5x slower than separate vectorized
// multiplies and adds. 512-bit vectors with AVX-512 (2x the multiply-adds per cycle of 256-bit
// ones on this machine's Xeon), else 256-bit. Elsewhere, one fma() per result (the same
// roundings: a vector FMA rounds each lane as fma() does).
#if defined(__x86_64__) && defined(__AVX__) && defined(__FMA__)
#define KILN_HOST_GEMM_VECTORS 1
template <typename T> struct kiln_host_vector { static constexpr bool exists = false; };
#ifdef __AVX512F__
typedef float kiln_host_f32v __attribute__((vector_size(64), aligned(4)));  // loads unaligned
typedef double kiln_host_f64v __attribute__((vector_size(64), aligned(8)));
template <> struct kiln_host_vector<float> {
  static constexpr bool exists = true;
  static constexpr int lanes = 16;
  typedef kiln_host_f32v type;
  static type fma(type a, type b, type c) {
    return __builtin_ia32_vfmaddps512_mask(a, b, c, static_cast<unsigned short>(-1), 4);
  }
};
template <> struct kiln_host_vector<double> {
  static constexpr bool exists = true;
  static constexpr int lanes = 8;
  typedef kiln_host_f64v type;
  static type fma(type a, type b, type c) {
    return __builtin_ia32_vfmaddpd512_mask(a, b, c, static_cast<unsigned char>(-1), 4);
  }
};
#else
typedef float kiln_host_f32v __attribute__((vector_size(32), aligned(4)));  // loads unaligned
typedef double kiln_host_f64v __attribute__((vector_size(32), aligned(8)));
template <> struct kiln_host_vector<float> {
  static constexpr bool exists = true;
  static constexpr int lanes = 8;
  typedef kiln_host_f32v type;
  static type fma(type a, type b, type c) { return __builtin_ia32_vfmaddps256(a, b, c); }
};
template <> struct kiln_host_vector<double> {
  static constexpr bool exists = true;
  static constexpr int lanes = 4;
  typedef kiln_host_f64v type;
  static type fma(type a, type b, type c) { return __builtin_ia32_vfmaddpd256(a, b, c); }
};
#endif

// 4 rows x kVectors vectors of results from column c0. With two vectors, 8 independent sums
// keep both FMA units busy through FMA's latency.
template <typename T, int kVectors>
static inline void kiln_host_gemm_block(T* acc, int acc_stride, const T* a_panel, int a_k_stride,
                                        int a_row_stride, const T* b_panel, int b_stride,
                                        int tile_k, int steps, int last_k, int r0, int c0) {
  typedef kiln_host_vector<T> Vector;
  typedef typename Vector::type V;
  constexpr int kRows = 4, kLanes = Vector::lanes;
  V sums[kRows][kVectors];
  for (int i = 0; i < kRows; ++i)
    for (int v = 0; v < kVectors; ++v)
      sums[i][v] = *reinterpret_cast<const V*>(acc + (r0 + i) * acc_stride + c0 + v * kLanes);
  for (int step = 0; step < steps; ++step) {
    const T* a_k = a_panel + step * tile_k * a_k_stride + r0 * a_row_stride;
    const T* b_k = b_panel + step * tile_k * b_stride + c0;
    const int valid_k = step == steps - 1 ? last_k : tile_k;
    for (int kk = 0; kk < valid_k; ++kk, a_k += a_k_stride, b_k += b_stride) {
      V b[kVectors];
      for (int v = 0; v < kVectors; ++v) b[v] = *reinterpret_cast<const V*>(b_k + v * kLanes);
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i) {
        V a;
        for (int lane = 0; lane < kLanes; ++lane) a[lane] = a_k[i * a_row_stride];  // broadcast
        for (int v = 0; v < kVectors; ++v) sums[i][v] = Vector::fma(a, b[v], sums[i][v]);
      }
    }
  }
  if (last_k < tile_k)
    for (int i = 0; i < kRows; ++i)
      for (int v = 0; v < kVectors; ++v) sums[i][v] += V{};
  for (int i = 0; i < kRows; ++i)
    for (int v = 0; v < kVectors; ++v)
      *reinterpret_cast<V*>(acc + (r0 + i) * acc_stride + c0 + v * kLanes) = sums[i][v];
}

// Columns two vectors at a time; `cols`, a multiple of 16, may leave one vector (16 floats).
template <typename T>
static inline void kiln_host_gemm_multiply_vectors(
    T* acc, int acc_stride, const T* a_panel, int a_k_stride, int a_row_stride, const T* b_panel,
    int b_stride, int tile_k, int steps, int last_k, int rows, int cols) {
  constexpr int kLanes = kiln_host_vector<T>::lanes;
  for (int r0 = 0; r0 < rows; r0 += 4) {
    int c0 = 0;
    for (; c0 + 2 * kLanes <= cols; c0 += 2 * kLanes)
      kiln_host_gemm_block<T, 2>(acc, acc_stride, a_panel, a_k_stride, a_row_stride, b_panel,
                                 b_stride, tile_k, steps, last_k, r0, c0);
    if (c0 < cols)
      kiln_host_gemm_block<T, 1>(acc, acc_stride, a_panel, a_k_stride, a_row_stride, b_panel,
                                 b_stride, tile_k, steps, last_k, r0, c0);
  }
}
#endif

template <typename T>
__attribute__((noinline)) static void kiln_host_gemm_multiply(
    T* acc, int acc_stride, const T* a_panel, int a_k_stride, int a_row_stride, const T* b_panel,
    int b_stride, int tile_k, int steps, int last_k, int rows, int cols) {
#ifdef KILN_HOST_GEMM_VECTORS
  if constexpr (kiln_host_vector<T>::exists) {
    kiln_host_gemm_multiply_vectors(acc, acc_stride, a_panel, a_k_stride, a_row_stride, b_panel,
                                    b_stride, tile_k, steps, last_k, rows, cols);
    return;
  }
#endif
  constexpr int kRows = 4, kCols = 16;
  for (int r0 = 0; r0 < rows; r0 += kRows) {
    for (int c0 = 0; c0 < cols; c0 += kCols) {
      T sums[kRows][kCols];
      for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kCols; ++j) sums[i][j] = acc[(r0 + i) * acc_stride + c0 + j];
      for (int step = 0; step < steps; ++step) {
        const T* a_k = a_panel + step * tile_k * a_k_stride + r0 * a_row_stride;
        const T* b_k = b_panel + step * tile_k * b_stride + c0;
        const int valid_k = step == steps - 1 ? last_k : tile_k;
        for (int kk = 0; kk < valid_k; ++kk, a_k += a_k_stride, b_k += b_stride)
          for (int i = 0; i < kRows; ++i)
            for (int j = 0; j < kCols; ++j) sums[i][j] = fma(a_k[i * a_row_stride], b_k[j], sums[i][j]);
      }
      if (last_k < tile_k)
        for (int i = 0; i < kRows; ++i)
          for (int j = 0; j < kCols; ++j) sums[i][j] += T(0);
      for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kCols; ++j) acc[(r0 + i) * acc_stride + c0 + j] = sums[i][j];
    }
  }
}

// The tensor-core template's host body: acc[r][c] += a b over the panel's `k_count` k the way
// the emulated mma.sync adds them (runtime/host/warp_collective.cpp): per block of `block_k` k
// (8 for TF32's m16n8k8, 16 for bf16's and f16's m16n8k16, counted from the panel's start,
// which is a k tile's), the accumulator widened to double, the block's products (of operands
// already rounded to the format, so exact in double) added in k order, the sum rounded once to
// float. Zero-padded blocks too: adding +0 turns an accumulator's -0 into +0, as on the warp.
// Columns inner, so that the sums vectorize along B's rows; `cols` <= 128.
__attribute__((noinline)) static void kiln_host_mma_multiply(
    float* acc, int acc_stride, const float* a_panel, int a_k_stride, int a_row_stride,
    const float* b_panel, int b_stride, int k_count, int block_k, int rows, int cols) {
  double sums[128];
  for (int r = 0; r < rows; ++r) {
    float* acc_row = acc + r * acc_stride;
    for (int k0 = 0; k0 < k_count; k0 += block_k) {
      for (int c = 0; c < cols; ++c) sums[c] = acc_row[c];
      for (int k = k0; k < k0 + block_k; ++k) {
        const double a = a_panel[k * a_k_stride + r * a_row_stride];
        const float* b_k = b_panel + k * b_stride;
        for (int c = 0; c < cols; ++c) sums[c] += a * static_cast<double>(b_k[c]);
      }
      for (int c = 0; c < cols; ++c) acc_row[c] = static_cast<float>(sums[c]);
    }
  }
}

