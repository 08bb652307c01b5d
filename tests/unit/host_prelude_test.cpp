// The host prelude's CUDA built-ins: codegen's device library compiles and computes against it;
// intrinsics, atomics across parallel blocks, vector types, static __shared__, dim3, and the
// cp.async emulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codegen/device_library.h"
#include "ir/diagnostic.h"
#include "tests/unit/host_test_util.h"

namespace kiln::runtime::host {
namespace {

using testing::options_for;

const char* const kKernels = R"(
// CUDA's alignments for vector types.
static_assert(alignof(float4) == 16 && sizeof(float4) == 16, "float4");
static_assert(alignof(float2) == 8 && alignof(int4) == 16 && alignof(double2) == 16, "vectors");
static_assert(alignof(float3) == 4 && sizeof(float3) == 12, "float3");
static_assert(alignof(uchar4) == 4 && alignof(longlong2) == 16, "small vectors");

// One output slot per check, written by thread 0.
extern "C" __global__ void __launch_bounds__(32) intrinsics_0(float* __restrict__ out) {
  if (threadIdx.x != 0) return;
  out[0] = __int_as_float(0x3f800000);
  out[1] = static_cast<float>(__float_as_int(2.0f) == 0x40000000);
  out[2] = __saturatef(1.5f) + __saturatef(-2.0f) + __saturatef(0.25f) + __saturatef(NAN);
  out[3] = rsqrtf(16.0f);
  out[4] = __expf(0.0f) + __logf(1.0f) + __fdividef(6.0f, 3.0f);
  out[5] = static_cast<float>(min(3, -4) + max(2u, 7u) + static_cast<int>(max(1.5f, -2.0f)));
  out[6] = static_cast<float>(__popc(0xf0f0u) + __clz(1) + __ffs(8));
  out[7] = static_cast<float>(__brev(1u) == 0x80000000u);
  out[8] = static_cast<float>(__float2int_rn(2.5f) + __float2int_rn(3.5f) + __float2int_rz(-1.7f));
  out[9] = -INFINITY;
  const float4 v = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
  out[10] = v.x + v.y + v.z + v.w;
  out[11] = kiln_gelu_erf(1.0f);
  out[12] = kiln_gelu_tanh(1.0f);
  out[13] = kiln_sigmoid(0.0f);
  out[14] = kiln_half_to_float(kiln_float_to_half(1.0f / 3.0f));
  out[15] = kiln_bf16_to_float(kiln_float_to_bf16(1.0f / 3.0f));
  out[16] = kiln_max(NAN, 1.0f);
  out[17] = static_cast<float>(kiln_float_to_i32(3e10f) == 2147483647);
  out[18] = __ldg(out + 10);
  out[19] = fmaf(2.0f, 3.0f, 1.0f) + tanhf(0.0f) + erff(0.0f) + sqrtf(4.0f);
}

// Atomics from every thread of every block (blocks run in parallel on workers).
extern "C" __global__ void __launch_bounds__(64) atomics_1(float* __restrict__ fsum,
    int* __restrict__ counters, unsigned long long* __restrict__ big) {
  atomicAdd(fsum, 1.0f);
  atomicAdd(&counters[0], 2);
  atomicMax(&counters[1], static_cast<int>(blockIdx.x * 64 + threadIdx.x));
  atomicMin(&counters[2], -static_cast<int>(threadIdx.x));
  atomicOr(&counters[3], 1 << (threadIdx.x % 31));
  unsigned int* u = reinterpret_cast<unsigned int*>(&counters[4]);
  atomicAdd(u, 1u);
  atomicAdd(big, 1ull << 32);
  int old = atomicCAS(&counters[5], 0, 7);
  if (old == 0) atomicExch(&counters[6], static_cast<int>(blockIdx.x) + 100);
}

// codegen's warp reductions, and static __shared__ (one copy per running block).
extern "C" __global__ void __launch_bounds__(64) warp_library_2(
    const float* __restrict__ x, float* __restrict__ out) {
  __shared__ float warp_max[2];
  const float v = x[blockIdx.x * 64 + threadIdx.x];
  const float sum = kiln_warp_sum(v);
  const float mx = kiln_warp_max(v);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = mx;
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = sum + kiln_max(warp_max[0], warp_max[1]);
}

// Built-in variables in three dimensions.
extern "C" __global__ void __launch_bounds__(24) dims_3(int* __restrict__ out) {
  const dim3 b = blockDim;
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + b.x * (threadIdx.y + b.y * threadIdx.z);
  out[block * 24 + thread] = block * 1000 + thread + warpSize * 0;
}

// cp.async as the PTX ISA orders it: a copy lands only once a wait lets its group; wait<N>
// performs every committed group but the newest N. Mode 1 copies to a misaligned address, mode 2
// keeps more copies in flight than the host backend holds; both are errors.
__global__ void async_copies_4(const float4* src, float* out, int mode) {
  __shared__ float4 staged[4];
  for (int i = 0; i < 4; ++i) staged[i] = make_float4(-1.0f, -1.0f, -1.0f, -1.0f);
  if (mode == 1) kiln_cp_async16(reinterpret_cast<char*>(staged) + 4, src, true);
  if (mode == 2)
    for (int i = 0; i < 65; ++i) kiln_cp_async16(&staged[0], src, true);
  kiln_cp_async16(&staged[0], &src[0], true);
  kiln_cp_async_commit();
  kiln_cp_async16(&staged[1], &src[1], true);
  kiln_cp_async_commit();
  kiln_cp_async16(&staged[2], &src[2], false);  // zero-filled, src not read
  out[0] = staged[0].x;                         // nothing landed yet
  kiln_cp_async_wait<1>();                      // the first group only
  out[1] = staged[0].x;
  out[2] = staged[1].x;
  kiln_cp_async_commit();
  kiln_cp_async_wait<0>();
  out[3] = staged[1].x;
  out[4] = staged[2].y;
  // A 3-stage pipeline far longer than the copies the host backend holds at once.
  for (int i = 0; i < 200; ++i) {
    kiln_cp_async16(&staged[3], &src[i % 4], true);
    kiln_cp_async_commit();
    kiln_cp_async_wait<2>();
  }
  out[5] = staged[3].x;  // the copy of i = 197 (src[1]) landed, i = 198 and 199 are in flight
  kiln_cp_async_wait<0>();
  out[6] = staged[3].x;  // i = 199: src[3]
}
)";

const char* const kEntries = R"(
extern "C" void kiln_host_entry_intrinsics_0(void* const* args) {
  intrinsics_0(static_cast<float*>(args[0]));
}
extern "C" void kiln_host_entry_atomics_1(void* const* args) {
  atomics_1(static_cast<float*>(args[0]), static_cast<int*>(args[1]),
            static_cast<unsigned long long*>(args[2]));
}
extern "C" void kiln_host_entry_warp_library_2(void* const* args) {
  warp_library_2(static_cast<const float*>(args[0]), static_cast<float*>(args[1]));
}
extern "C" void kiln_host_entry_dims_3(void* const* args) { dims_3(static_cast<int*>(args[0])); }
extern "C" void kiln_host_entry_async_copies_4(void* const* args) {
  async_copies_4(static_cast<const float4*>(args[0]), static_cast<float*>(args[1]),
                 *static_cast<const int*>(args[2]));
}
)";

class HostPreludeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static HostModule compiled = HostModule::compile(
        testing::translation_unit(std::string(codegen::device_library()) + kKernels, kEntries),
        "host_prelude_test", testing::test_cache());
    module_ = &compiled;
  }
  const HostModule* module_ = nullptr;
};

TEST_F(HostPreludeTest, IntrinsicsAndDeviceLibrary) {
  std::vector<float> out(20, -1.0f);
  void* args[] = {out.data()};
  module_->launch("intrinsics_0", args, {1, 1, 1}, {32, 1, 1}, 0, false, options_for("order"));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 1.25f);
  EXPECT_EQ(out[3], 0.25f);
  EXPECT_EQ(out[4], 3.0f);
  EXPECT_EQ(out[5], -4.0f + 7.0f + 1.0f);
  EXPECT_EQ(out[6], 8.0f + 31.0f + 4.0f);
  EXPECT_EQ(out[7], 1.0f);
  EXPECT_EQ(out[8], 2.0f + 4.0f - 1.0f);  // round half to even
  EXPECT_EQ(out[9], -INFINITY);
  EXPECT_EQ(out[10], 10.0f);
  EXPECT_NEAR(out[11], 0.8413447f, 1e-6f);
  EXPECT_NEAR(out[12], 0.8411920f, 1e-6f);
  EXPECT_EQ(out[13], 0.5f);
  EXPECT_EQ(out[14], 0.333251953125f);  // nearest binary16
  EXPECT_EQ(out[15], 0.333984375f);     // nearest bfloat16
  EXPECT_TRUE(std::isnan(out[16]));
  EXPECT_EQ(out[17], 1.0f);
  EXPECT_EQ(out[18], 10.0f);
  EXPECT_EQ(out[19], 9.0f);
}

TEST_F(HostPreludeTest, AtomicsAcrossParallelBlocks) {
  constexpr int kBlocks = 40;
  float fsum = 0.0f;
  std::vector<int> counters = {0, -1, 0, 0, 0, 0, 0};
  unsigned long long big = 0;
  void* args[] = {&fsum, counters.data(), &big};
  module_->launch("atomics_1", args, {kBlocks, 1, 1}, {64, 1, 1}, 0, false,
                  options_for("random:3", 2));
  EXPECT_EQ(fsum, kBlocks * 64.0f);
  EXPECT_EQ(counters[0], kBlocks * 64 * 2);
  EXPECT_EQ(counters[1], kBlocks * 64 - 1);
  EXPECT_EQ(counters[2], -63);
  EXPECT_EQ(counters[3], 0x7fffffff);
  EXPECT_EQ(counters[4], kBlocks * 64);
  EXPECT_EQ(big, static_cast<unsigned long long>(kBlocks) * 64 << 32);
  EXPECT_EQ(counters[5], 7);
  EXPECT_GE(counters[6], 100);
}

TEST_F(HostPreludeTest, DeviceLibraryWarpReductionsAndStaticShared) {
  constexpr int kBlocks = 16;
  std::vector<float> x(kBlocks * 64), out(kBlocks * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 19);
  void* args[] = {x.data(), out.data()};
  for (int workers : {1, 2}) {
    module_->launch("warp_library_2", args, {kBlocks, 1, 1}, {64, 1, 1}, 0, true,
                    options_for("random:8", workers));
    for (int b = 0; b < kBlocks; ++b) {
      float sums[2] = {0, 0}, block_max = 0.0f;
      for (int t = 0; t < 64; ++t) {
        sums[t / 32] += x[b * 64 + t];
        block_max = std::max(block_max, x[b * 64 + t]);
      }
      for (int t = 0; t < 64; ++t)
        ASSERT_EQ(out[b * 64 + t], sums[t / 32] + block_max) << b << " " << t;
    }
  }
}

TEST_F(HostPreludeTest, BuiltInVariablesInThreeDimensions) {
  std::vector<int> out(6 * 24, -1);
  void* args[] = {out.data()};
  module_->launch("dims_3", args, {3, 2, 1}, {2, 3, 4}, 0, false, options_for("reverse"));
  for (int block = 0; block < 6; ++block)
    for (int thread = 0; thread < 24; ++thread)
      EXPECT_EQ(out[block * 24 + thread], block * 1000 + thread);
}

TEST_F(HostPreludeTest, AsyncCopiesLandWhenTheirGroupIsWaitedFor) {
  alignas(16) float src[16];
  for (int i = 0; i < 16; ++i) src[i] = 10.0f * static_cast<float>(i / 4 + 1);  // src[k].x = 10(k+1)
  std::vector<float> out(7, 0.0f);
  int mode = 0;
  void* args[] = {src, out.data(), &mode};
  module_->launch("async_copies_4", args, {2, 1, 1}, {1, 1, 1}, 0, false, options_for("order"));
  EXPECT_EQ(out, (std::vector<float>{-1.0f, 10.0f, -1.0f, 20.0f, 0.0f, 20.0f, 40.0f}));

  for (auto [bad, message] : {std::pair{1, "cp.async of 16 bytes from or to an address not aligned to 16"},
                              std::pair{2, "more than 64 cp.async copies in flight in one GPU thread"}}) {
    mode = bad;
    try {
      module_->launch("async_copies_4", args, {1, 1, 1}, {1, 1, 1}, 0, false,
                      options_for("order"));
      ADD_FAILURE() << "mode " << mode << " ran";
    } catch (const std::exception& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace kiln::runtime::host
