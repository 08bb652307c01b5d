// Philox known answers, initializer spec checking, and the statistics of drawn tensors.
#include "ir/initializer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ir/op_registry.h"
#include "ir/philox.h"

namespace kiln::ir {
namespace {

// Random123's known-answer vectors for philox4x32_10 (kat_vectors). Our key is the 64-bit seed
// k0 | k1 << 32.
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    philox::Block counter;
    uint32_t k0, k1;
    philox::Block expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& kat : kats) {
    const philox::Block out =
        philox::philox4x32_10(kat.counter, uint64_t{kat.k0} | uint64_t{kat.k1} << 32);
    for (int lane = 0; lane < 4; ++lane)
      EXPECT_EQ(out.v[lane], kat.expected.v[lane]) << "lane " << lane << " key " << kat.k0;
  }
}

TEST(Philox, StreamLayout) {
  // Word i is lane i % 4 of block i / 4; the offset fills the upper counter words.
  const philox::Block block = philox::philox4x32_10({{1, 0, 7, 0}}, 42);
  EXPECT_EQ(philox::random_u32(42, 7, 5), block.v[1]);
  EXPECT_EQ(philox::uniform_from_u32(0), 0.0f);
  EXPECT_LT(philox::uniform_from_u32(0xffffffff), 1.0f);
  EXPECT_EQ(philox::uniform_from_u32(0x80000000), 0.5f);
}

TEST(Initializer, ListsKinds) {
  EXPECT_EQ(initializer_kinds(),
            (std::vector<std::string>{"zeros", "ones", "constant", "uniform", "normal",
                                      "glorot_uniform", "he_normal"}));
}

const TensorType kF32{DType::F32, {4, 3}};

InitializerSpec normalized(InitializerSpec spec, const TensorType& type = kF32) {
  normalize_initializer(spec, type);
  return spec;
}

TEST(Initializer, FillsDefaultsAndCoerces) {
  const InitializerSpec uniform = normalized({"uniform", {{"low", int64_t{0}}}});
  EXPECT_EQ(uniform.args, (AttrMap{{"low", 0.0}, {"high", 1.0}, {"seed", int64_t{0}}}));
  const InitializerSpec normal = normalized({"normal", {{"seed", int64_t{9}}}});
  EXPECT_EQ(normal.args, (AttrMap{{"mean", 0.0}, {"std", 1.0}, {"seed", int64_t{9}}}));
  EXPECT_EQ(normalized({"he_normal", {}}).args, (AttrMap{{"seed", int64_t{0}}}));
  EXPECT_EQ(normalized({"zeros", {}}).args, AttrMap{});
  // Integer and bool parameters take zeros, ones and exact constants.
  EXPECT_NO_THROW(normalized({"zeros", {}}, {DType::I64, {2}}));
  EXPECT_NO_THROW(normalized({"ones", {}}, {DType::Bool, {2}}));
  EXPECT_NO_THROW(normalized({"constant", {{"value", int64_t{-3}}}}, {DType::I32, {2}}));
}

// The OpError that normalizing `spec` throws.
OpError error_of(InitializerSpec spec, const TensorType& type = kF32) {
  try {
    normalize_initializer(spec, type);
  } catch (const OpError& error) {
    return error;
  }
  ADD_FAILURE() << "expected an OpError for " << spec.kind;
  return {};
}

TEST(Initializer, RejectsUnknownKindsAndArguments) {
  EXPECT_EQ(error_of({"he_norml", {}}).message,
            "unknown initializer 'he_norml'; did you mean 'he_normal'?");
  EXPECT_EQ(error_of({"xavier", {}}).message,
            "unknown initializer 'xavier'; kiln has zeros, ones, constant, uniform, normal, "
            "glorot_uniform, he_normal");
  const OpError typo = error_of({"uniform", {{"hgh", 1.0}}});
  EXPECT_EQ(typo.message, "initializer 'uniform' has no argument 'hgh'; did you mean 'high'?");
  EXPECT_EQ(typo.attr, "hgh");
  EXPECT_EQ(error_of({"zeros", {{"seed", int64_t{1}}}}).message,
            "initializer 'zeros' has no argument 'seed'; it takes no arguments");
  EXPECT_EQ(error_of({"normal", {{"scale", 1.0}}}).message,
            "initializer 'normal' has no argument 'scale'; it takes mean, std, seed");
}

TEST(Initializer, RejectsBadArguments) {
  const OpError missing = error_of({"constant", {}});
  EXPECT_EQ(missing.message, "initializer 'constant' needs argument 'value'");
  EXPECT_EQ(missing.attr, "value");
  const OpError order = error_of({"uniform", {{"low", 2.0}, {"high", 1.0}}});
  EXPECT_EQ(order.message, "argument 'low' (2.0) is greater than 'high' (1.0)");
  EXPECT_EQ(order.attr, "low");
  EXPECT_EQ(error_of({"normal", {{"std", -1.0}}}).message,
            "argument 'std' (-1.0) must not be negative");
  EXPECT_EQ(error_of({"normal", {{"mean", INFINITY}}}).message,
            "argument 'mean' (inf) must be finite");
  const OpError seed = error_of({"he_normal", {{"seed", int64_t{-1}}}});
  EXPECT_EQ(seed.message, "argument 'seed' must be a non-negative int, got -1");
  EXPECT_EQ(seed.attr, "seed");
  EXPECT_EQ(error_of({"uniform", {{"seed", 1.5}}}).message,
            "argument 'seed' must be a non-negative int, got a float (1.5)");
  const OpError type = error_of({"constant", {{"value", std::string("one")}}});
  EXPECT_EQ(type.message, "argument 'value' must be a float, got a string (\"one\")");
  EXPECT_EQ(type.attr, "value");
}

TEST(Initializer, RejectsDtypesTheKindCannotFill) {
  const OpError random_int = error_of({"uniform", {}}, {DType::I32, {3}});
  EXPECT_EQ(random_int.message, "initializer 'uniform' needs a float parameter, not i32[3]");
  EXPECT_EQ(random_int.attr, "");
  EXPECT_EQ(error_of({"he_normal", {}}, {DType::Bool, {3}}).message,
            "initializer 'he_normal' needs a float parameter, not bool[3]");
  EXPECT_EQ(error_of({"glorot_uniform", {}}, {DType::F32, {}}).message,
            "initializer 'glorot_uniform' scales by fan-in, which a scalar parameter does not "
            "have (f32[])");
  EXPECT_EQ(error_of({"constant", {{"value", 0.5}}}, {DType::I32, {2}}).message,
            "argument 'value' (0.5) is not representable in the parameter's type i32[2]");
  EXPECT_EQ(error_of({"constant", {{"value", 3e9}}}, {DType::I32, {2}}).message,
            "argument 'value' (3000000000.0) is not representable in the parameter's type i32[2]");
  EXPECT_EQ(error_of({"constant", {{"value", 2.0}}}, {DType::Bool, {2}}).message,
            "argument 'value' (2.0) must be 0 or 1 for a bool parameter");
}

Tensor draw(InitializerSpec spec, const TensorType& type) {
  normalize_initializer(spec, type);
  return materialize_initializer(spec, type);
}

TEST(Initializer, DeterministicFills) {
  EXPECT_EQ(draw({"zeros", {}}, {DType::F16, {3}}).to_doubles(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(draw({"ones", {}}, {DType::I64, {2}}).to_doubles(), (std::vector<double>{1, 1}));
  EXPECT_EQ(draw({"constant", {{"value", -2.5}}}, {DType::BF16, {2}}).to_doubles(),
            (std::vector<double>{-2.5, -2.5}));
  EXPECT_EQ(draw({"constant", {{"value", int64_t{7}}}}, {DType::I32, {}}).to_doubles(),
            (std::vector<double>{7}));
}

// Large tensors fill in chunks on every core; element i still depends on (seed, i) only, so a
// large draw starts with exactly the elements of a small one (filled on one thread).
TEST(Initializer, ChunkedFillsEqualOnePass) {
  for (const char* kind : {"normal", "uniform"}) {
    const InitializerSpec spec{kind, {{"seed", int64_t{11}}}};
    const std::vector<double> large = draw(spec, {DType::F32, {400000}}).to_doubles();
    const std::vector<double> small = draw(spec, {DType::F32, {1000}}).to_doubles();
    EXPECT_TRUE(std::equal(small.begin(), small.end(), large.begin())) << kind;
  }
  // Across the chunk seams (anywhere in the tensor), element i is word i of the stream.
  const InitializerSpec uniform{
      "uniform", {{"low", 0.0}, {"high", 1.0}, {"seed", int64_t{11}}}};
  const std::vector<double> large = draw(uniform, {DType::F32, {400000}}).to_doubles();
  for (uint64_t i : {uint64_t{0}, uint64_t{133333}, uint64_t{200000}, uint64_t{266667},
                     uint64_t{399999}})
    EXPECT_EQ(large[i], double(philox::uniform_from_u32(philox::random_u32(11, 0, i)))) << i;
}

struct Moments {
  double mean, std, min, max;
};
Moments moments_of(const Tensor& tensor) {
  const std::vector<double> values = tensor.to_doubles();
  double sum = 0, sum_sq = 0;
  for (double v : values) sum += v;
  const double mean = sum / double(values.size());
  for (double v : values) sum_sq += (v - mean) * (v - mean);
  return {mean, std::sqrt(sum_sq / double(values.size())),
          *std::min_element(values.begin(), values.end()),
          *std::max_element(values.begin(), values.end())};
}

constexpr int64_t kSamples = 10000;

TEST(Initializer, UniformStatistics) {
  const Moments m = moments_of(
      draw({"uniform", {{"low", -2.0}, {"high", 6.0}, {"seed", int64_t{3}}}},
           {DType::F32, {kSamples}}));
  EXPECT_GE(m.min, -2.0);
  EXPECT_LT(m.max, 6.0);
  EXPECT_LT(m.min, -1.99);
  EXPECT_GT(m.max, 5.99);
  EXPECT_NEAR(m.mean, 2.0, 0.1);                  // std error 8/sqrt(12)/100 = 0.023
  EXPECT_NEAR(m.std, 8.0 / std::sqrt(12.0), 0.05);
}

TEST(Initializer, NormalStatistics) {
  const Moments m = moments_of(
      draw({"normal", {{"mean", 2.0}, {"std", 3.0}, {"seed", int64_t{5}}}},
           {DType::F32, {100, 100}}));
  EXPECT_NEAR(m.mean, 2.0, 0.1);  // std error 0.03
  EXPECT_NEAR(m.std, 3.0, 0.1);
  EXPECT_TRUE(std::isfinite(m.min) && std::isfinite(m.max));
  EXPECT_LT(m.min, 2.0 - 3 * 3.0);  // 10k samples reach past 3 sigma
  EXPECT_GT(m.max, 2.0 + 3 * 3.0);
}

TEST(Initializer, GlorotUniformScalesByFans) {
  // fan_in = 32 * 3 * 3 = 288, fan_out = 64 * 3 * 3 = 576.
  const double bound = std::sqrt(6.0 / (288 + 576));
  const Moments m = moments_of(draw({"glorot_uniform", {}}, {DType::F32, {64, 32, 3, 3}}));
  EXPECT_GE(m.min, -bound);
  EXPECT_LE(m.max, bound);
  EXPECT_GT(m.max, 0.99 * bound);
  EXPECT_NEAR(m.std, bound / std::sqrt(3.0), 0.02 * bound);
  // Rank 1: fan_in = fan_out = size.
  const Moments flat = moments_of(draw({"glorot_uniform", {}}, {DType::F32, {kSamples}}));
  EXPECT_LE(flat.max, std::sqrt(6.0 / (2 * kSamples)));
  EXPECT_GT(flat.max, 0.99 * std::sqrt(6.0 / (2 * kSamples)));
}

TEST(Initializer, HeNormalScalesByFanIn) {
  // fan_in = 64 * 3 * 3 = 576, over 128 * 576 = 73728 samples.
  const Moments m = moments_of(draw({"he_normal", {{"seed", int64_t{1}}}},
                                    {DType::F32, {128, 64, 3, 3}}));
  const double expected = std::sqrt(2.0 / 576);
  EXPECT_NEAR(m.mean, 0.0, 0.02 * expected);
  EXPECT_NEAR(m.std, expected, 0.02 * expected);
  // A matrix [out, in]: fan_in is the second dim.
  const Moments fc = moments_of(draw({"he_normal", {}}, {DType::F32, {1000, 50}}));
  EXPECT_NEAR(fc.std, std::sqrt(2.0 / 50), 0.03 * std::sqrt(2.0 / 50));
}

TEST(Initializer, SameSeedSameTensorOtherSeedOtherTensor) {
  const TensorType type{DType::F32, {16, 8}};
  for (const char* kind : {"uniform", "normal", "glorot_uniform", "he_normal"}) {
    const Tensor a = draw({kind, {{"seed", int64_t{7}}}}, type);
    const Tensor b = draw({kind, {{"seed", int64_t{7}}}}, type);
    const Tensor c = draw({kind, {{"seed", int64_t{8}}}}, type);
    EXPECT_EQ(a.bytes(), b.bytes()) << kind;
    EXPECT_NE(a.bytes(), c.bytes()) << kind;
  }
}

// Element i uses word i (uniform) or words 2i, 2i+1 (normal) of the stream at (seed, 0): the
// contract the CUDA backend reproduces.
TEST(Initializer, ElementsFollowTheDocumentedStream) {
  const uint64_t seed = 11;
  const Tensor uniform =
      draw({"uniform", {{"low", 0.0}, {"high", 1.0}, {"seed", int64_t(seed)}}}, {DType::F32, {9}});
  const Tensor normal = draw({"normal", {{"seed", int64_t(seed)}}}, {DType::F32, {9}});
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_EQ(uniform.get(i), philox::uniform_from_u32(philox::random_u32(seed, 0, i)));
    const double u1 = 1.0 - philox::uniform_from_u32(philox::random_u32(seed, 0, 2 * i));
    const double u2 = philox::uniform_from_u32(philox::random_u32(seed, 0, 2 * i + 1));
    const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
    EXPECT_EQ(normal.get(i), double(static_cast<float>(z))) << i;
  }
}

TEST(Initializer, DrawsHalfPrecision) {
  const Tensor half = draw({"uniform", {{"seed", int64_t{2}}}}, {DType::F16, {1000}});
  const Moments m = moments_of(half);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LE(m.max, 1.0);
  EXPECT_NEAR(m.mean, 0.0, 0.1);
}

}  // namespace
}  // namespace kiln::ir
