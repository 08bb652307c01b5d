// The reference interpreter: hand-computed answers, run-time errors, input checking, and
// coverage of the op registry. Broad numerical checks live in tests/torch/.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"
#include "ir/philox.h"

namespace kiln::eval {
namespace {

using ir::DType;
using ir::Tensor;
using ir::TensorType;

Tensor f32(ir::Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(TensorType{DType::F32, std::move(shape)}, values);
}

// Appends `op` applied to `inputs`, with result types from shape inference.
ir::Node* add_op(ir::Graph& graph, const std::string& op, const std::string& name,
                 std::vector<ir::Value*> inputs, ir::AttrMap attrs = {}) {
  const ir::OpDef* def = ir::OpRegistry::instance().find(op);
  EXPECT_NE(def, nullptr) << op;
  std::vector<TensorType> types;
  for (const ir::Value* v : inputs) types.push_back(v->type);
  const std::vector<TensorType> result_types = ir::infer_op(*def, types, attrs);
  std::vector<std::pair<std::string, TensorType>> results;
  for (size_t i = 0; i < result_types.size(); ++i)
    results.emplace_back(name + "." + std::to_string(i), result_types[i]);
  ir::Node* node = graph.add_node(*ir::find_op_id(op), name, std::move(inputs), std::move(attrs), results);
  node->def = def;
  return node;
}

// Builds x -> op -> output for a one-operand op and runs it.
Tensor run_unary(const std::string& op, const Tensor& x, ir::AttrMap attrs = {}) {
  ir::Graph graph;
  ir::Value* input = graph.add_input("x", x.type());
  graph.outputs = add_op(graph, op, op, {input}, std::move(attrs))->results;
  return run_reference(graph, {{"x", x}}).at(0);
}

void expect_values(const Tensor& got, const std::vector<double>& want, double tolerance = 1e-6) {
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.get(static_cast<int64_t>(i)), want[i], tolerance) << "element " << i;
}

TEST(ReferenceInterpreter, EveryRegisteredOpHasAKernel) {
  const auto& ops = ir::OpRegistry::instance().all();
  EXPECT_FALSE(ops.empty());
  for (const ir::OpDef& def : ops)
    EXPECT_NE(find_reference_kernel(def.id), nullptr) << "no reference kernel for " << def.name;
}

// round halves to even (ONNX Round, numpy.round); sign keeps zero; is_inf reads its attrs.
TEST(ReferenceInterpreter, RoundingAndPredicatesKnownAnswers) {
  const double inf = std::numeric_limits<double>::infinity();
  expect_values(run_unary("round", f32({6}, {0.5, 1.5, 2.5, -0.5, -2.5, 2.6})),
                {0, 2, 2, -0.0, -2, 3}, 0);
  expect_values(run_unary("floor", f32({3}, {-1.5, 1.5, 2})), {-2, 1, 2}, 0);
  expect_values(run_unary("ceil", f32({3}, {-1.5, 1.5, 2})), {-1, 2, 2}, 0);
  expect_values(run_unary("sign", f32({3}, {-3, 0, 0.25})), {-1, 0, 1}, 0);
  expect_values(run_unary("is_inf", f32({3}, {inf, -inf, 1}), {{"detect_negative", false}}),
                {1, 0, 0}, 0);
  expect_values(run_unary("logical_not", Tensor::from_doubles({DType::Bool, {2}}, {1, 0})),
                {0, 1}, 0);
}

// mod: the remainder takes the divisor's sign, or the dividend's with fmod (ONNX Mod).
TEST(ReferenceInterpreter, ModKnownAnswers) {
  for (DType dtype : {DType::I32, DType::I64, DType::F32}) {
    for (bool fmod : {false, true}) {
      if (dtype == DType::F32 && !fmod) continue;
      ir::Graph graph;
      ir::Value* a = graph.add_input("a", TensorType{dtype, {4}});
      ir::Value* b = graph.add_input("b", TensorType{dtype, {4}});
      graph.outputs = add_op(graph, "mod", "m", {a, b}, {{"fmod", fmod}})->results;
      const auto out = run_reference(
          graph, {{"a", Tensor::from_doubles({dtype, {4}}, {7, -7, 7, -7})},
                  {"b", Tensor::from_doubles({dtype, {4}}, {3, 3, -3, -3})}});
      expect_values(out[0], fmod ? std::vector<double>{1, -1, 1, -1}
                                 : std::vector<double>{1, 2, -2, -1},
                    0);
    }
  }
}

// 3x3 all-ones kernel with padding 1 over 1..9: each output is the sum of its neighbourhood.
TEST(ReferenceInterpreter, Conv2dKnownAnswer) {
  ir::Graph graph;
  ir::Value* x = graph.add_input("x", TensorType{DType::F32, {1, 1, 3, 3}});
  ir::Value* w = graph.add_input("w", TensorType{DType::F32, {1, 1, 3, 3}});
  ir::Value* b = graph.add_input("b", TensorType{DType::F32, {1}});
  graph.outputs =
      add_op(graph, "conv2d", "conv", {x, w, b}, {{"pad", std::vector<int64_t>{1, 1, 1, 1}}})
          ->results;
  const auto out = run_reference(graph, {{"x", f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})},
                                         {"w", f32({1, 1, 3, 3}, std::vector<double>(9, 1.0))},
                                         {"b", f32({1}, {0.5})}});
  EXPECT_EQ(out.at(0).type().to_string(), "f32[1,1,3,3]");
  expect_values(out[0], {12.5, 21.5, 16.5, 27.5, 45.5, 33.5, 24.5, 39.5, 28.5});
}

// Asymmetric padding [top=1, left=0, bottom=0, right=1], stride 2, no bias.
TEST(ReferenceInterpreter, Conv2dAsymmetricPadAndStride) {
  ir::Graph graph;
  ir::Value* x = graph.add_input("x", TensorType{DType::F32, {1, 1, 3, 3}});
  ir::Value* w = graph.add_input("w", TensorType{DType::F32, {1, 1, 2, 2}});
  graph.outputs = add_op(graph, "conv2d", "conv", {x, w},
                         {{"pad", std::vector<int64_t>{1, 0, 0, 1}},
                          {"stride", std::vector<int64_t>{2, 2}}})
                      ->results;
  // Padded input rows: [0 0 0 0], [1 2 3 0], [4 5 6 0], [7 8 9 0]; windows at rows 0, 2 and
  // columns 0, 2 with weight [[1, 10], [100, 1000]].
  const auto out = run_reference(graph, {{"x", f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})},
                                         {"w", f32({1, 1, 2, 2}, {1, 10, 100, 1000})}});
  EXPECT_EQ(out.at(0).type().to_string(), "f32[1,1,2,2]");
  expect_values(out[0], {100 + 2000, 300, 4 + 50 + 700 + 8000, 6 + 900});
}

TEST(ReferenceInterpreter, SoftmaxRowsSumToOneEvenForLargeLogits) {
  const Tensor out = run_unary("softmax", f32({2, 3}, {1000, 1001, 1002, -5, 0, 5}));
  for (int row = 0; row < 2; ++row) {
    double sum = 0;
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(std::isfinite(out.get(row * 3 + i)));
      sum += out.get(row * 3 + i);
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // softmax([0, 1, 2]) shifted by 1000 is unchanged.
  // Row 0 is softmax([0, 1, 2]) shifted by 1000; row 1 is softmax([-10, -5, 0]) shifted by 5.
  const double e = std::exp(1.0), z0 = 1 + e + e * e;
  const double s = std::exp(-5.0), z1 = s * s + s + 1;
  expect_values(out, {1 / z0, e / z0, e * e / z0, s * s / z1, s / z1, 1 / z1});
}

TEST(ReferenceInterpreter, MatmulKnownAnswers) {
  ir::Graph graph;
  ir::Value* a = graph.add_input("a", TensorType{DType::F32, {2, 2, 2}});
  ir::Value* b = graph.add_input("b", TensorType{DType::F32, {2, 2}});
  ir::Node* plain = add_op(graph, "matmul", "plain", {a, b});
  ir::Node* bt = add_op(graph, "matmul", "bt", {a, b}, {{"transpose_b", true}});
  graph.outputs = {plain->results[0], bt->results[0]};
  const auto out = run_reference(graph, {{"a", f32({2, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0})},
                                         {"b", f32({2, 2}, {5, 6, 7, 8})}});
  EXPECT_EQ(out.at(0).type().to_string(), "f32[2,2,2]");
  // [[1,2],[3,4]] @ [[5,6],[7,8]] and the permutation [[0,1],[1,0]] @ b (b broadcast).
  expect_values(out[0], {19, 22, 43, 50, 7, 8, 5, 6});
  // ... @ b^T = [[5,7],[6,8]].
  expect_values(out[1], {17, 23, 39, 53, 6, 8, 5, 7});
}

TEST(ReferenceInterpreter, IntegerDivisionTruncatesTowardZero) {
  ir::Graph graph;
  const TensorType type{DType::I32, {4}};
  ir::Value* a = graph.add_input("a", type);
  ir::Value* b = graph.add_input("b", type);
  graph.outputs = add_op(graph, "div", "div", {a, b})->results;
  const auto out = run_reference(graph, {{"a", Tensor::from_doubles(type, {-7, 7, 7, -1})},
                                         {"b", Tensor::from_doubles(type, {2, -2, 2, 3})}});
  expect_values(out.at(0), {-3, -3, 3, 0}, 0);
}

// kI64Min / -1 overflows (a trap on x86) and saturates instead; u64 divides unsigned, its
// largest values included (2^63 and 2^64 - 1 do not fit an int64).
TEST(ReferenceInterpreter, IntegerDivisionAtTheLimits) {
  for (const DType dtype : {DType::I64, DType::U64}) {
    ir::Graph graph;
    const TensorType type{dtype, {3}};
    ir::Value* a = graph.add_input("a", type);
    ir::Value* b = graph.add_input("b", type);
    graph.outputs = add_op(graph, "div", "div", {a, b})->results;
    graph.outputs.push_back(add_op(graph, "mod", "mod", {a, b})->results[0]);
    const double p63 = std::ldexp(1.0, 63);
    const bool is_signed = dtype == DType::I64;
    const auto out = run_reference(
        graph, {{"a", Tensor::from_doubles(type, {is_signed ? -p63 : p63, 9, is_signed ? 7 : 2 * p63})},
                {"b", Tensor::from_doubles(type, {is_signed ? -1 : std::ldexp(1.0, 62), 4, 3})}});
    if (is_signed) {
      expect_values(out.at(0), {p63 - 1, 2, 2}, 0);
      expect_values(out.at(1), {0, 1, 1}, 0);
    } else {
      expect_values(out.at(0), {2, 2, 6148914691236517205.0}, 0);
      expect_values(out.at(1), {0, 1, 0}, 0);
    }
  }
}

// Labels [N] against logits [N, C]; the node is located as if loaded from a model file.
std::vector<Tensor> run_cross_entropy(const Tensor& logits, const Tensor& labels) {
  ir::Graph graph;
  ir::Value* l = graph.add_input("logits", logits.type());
  ir::Value* y = graph.add_input("labels", labels.type());
  ir::Node* node = add_op(graph, "softmax_cross_entropy", "loss", {l, y});
  node->loc = ir::SourceLoc{"model.json", "/nodes/7", 0, 0};
  graph.outputs = node->results;
  return run_reference(graph, {{"logits", logits}, {"labels", labels}});
}

TEST(ReferenceInterpreter, CrossEntropyOfUniformLogitsIsLogC) {
  const TensorType labels{DType::I64, {2}};
  const auto out = run_cross_entropy(f32({2, 4}, std::vector<double>(8, 3.0)),
                                     Tensor::from_doubles(labels, {0, 3}));
  EXPECT_EQ(out.at(0).type().to_string(), "f32[]");
  expect_values(out[0], {std::log(4.0)});
}

TEST(ReferenceInterpreter, CrossEntropyRejectsLabelOutOfRange) {
  const TensorType labels{DType::I32, {4}};
  try {
    run_cross_entropy(f32({4, 10}, std::vector<double>(40, 0.0)),
                      Tensor::from_doubles(labels, {0, 9, 1, 12}));
    FAIL() << "expected kiln::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().location, "model.json: /nodes/7");
    EXPECT_EQ(error.diagnostic().message,
              "softmax_cross_entropy 'loss': label 12 at batch index 3 is outside [0, 10)");
  }
  // Negative labels are out of range too.
  EXPECT_THROW(run_cross_entropy(f32({1, 3}, {0, 0, 0}),
                                 Tensor::from_doubles(TensorType{DType::I64, {1}}, {-1})),
               Error);
}

TEST(ReferenceInterpreter, DropoutIsIdentityAtInference) {
  const Tensor x = f32({3}, {1, -2, 3});
  expect_values(run_unary("dropout", x, {{"rate", 0.5}}), {1, -2, 3}, 0);
}

// Philox 4x32-10 against the known-answer vectors of Random123 (kat_vectors, philox4x32_10):
// counter, key (k0 | k1 << 32), result.
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Known {
    ir::philox::Block counter;
    uint64_t key;
    ir::philox::Block want;
  };
  const Known known[] = {
      {{{0, 0, 0, 0}}, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffffffffffull,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0x299f31d0a4093822ull,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Known& k : known) {
    const ir::philox::Block got = ir::philox::philox4x32_10(k.counter, k.key);
    for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(got.v[lane], k.want.v[lane]) << lane;
  }
}

// Training dropout keeps element i when Philox word i of (seed, step) reaches the threshold,
// and scales what it keeps by 1 / (1 - rate). The mask is written out, not recomputed with the
// interpreter's own functions: bit i of kKeep is whether word i of the stream (seed 99, step 5)
// -- block i / 4 with counter (i / 4, 0, 5, 0) and key 99, lane i % 4 -- has its top 24 bits
// >= ceil(0.25 * 2^24). Computed by an independent Philox 4x32-10 in Python that reproduces
// the Random123 vectors above; 49 of the 64 elements are kept.
TEST(ReferenceInterpreter, TrainingDropoutDrawsItsMaskFromPhilox) {
  constexpr uint64_t kKeep = 0xf2bb77ffbfb37dafull;
  // The first words of that stream, for a reader checking by hand.
  EXPECT_EQ(ir::philox::random_u32(99, 5, 0), 0xb6499cf5u);
  EXPECT_EQ(ir::philox::random_u32(99, 5, 3), 0xf4257bdcu);
  EXPECT_EQ(ir::philox::dropout_threshold(0.25), 0x400000u);
  ir::Graph graph;
  ir::Value* x = graph.add_input("x", TensorType{DType::F32, {64}});
  ir::Value* step = graph.add_input("step", TensorType{DType::I32, {1}});
  graph.outputs =
      add_op(graph, "dropout", "drop", {x, step},
             {{"rate", 0.25}, {"training", true}, {"seed", int64_t{99}}})->results;
  const Tensor out = run_reference(graph, {{"x", f32({64}, std::vector<double>(64, 3.0))},
                                           {"step", Tensor::from_doubles({DType::I32, {1}}, {5})}})
                         .at(0);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(out.get(i), (kKeep >> i) & 1 ? 4.0 : 0.0) << i;
}

// A graph with one declared input, "image", feeding relu.
class InputChecking : public testing::Test {
 protected:
  void SetUp() override {
    ir::Value* image = graph_.add_input("image", TensorType{DType::F32, {1, 1, 28, 28}});
    graph_.outputs = add_op(graph_, "relu", "relu", {image})->results;
  }
  Diagnostic run_expecting_error(const std::map<std::string, Tensor>& inputs) {
    try {
      run_reference(graph_, inputs);
    } catch (const Error& error) {
      return error.diagnostic();
    }
    ADD_FAILURE() << "expected kiln::Error";
    return {};
  }
  ir::Graph graph_;
};

TEST_F(InputChecking, AcceptsTheDeclaredType) {
  const Tensor image(TensorType{DType::F32, {1, 1, 28, 28}});
  EXPECT_EQ(run_reference(graph_, {{"image", image}}).at(0).type(), image.type());
}

TEST_F(InputChecking, RejectsWrongShape) {
  const Diagnostic d =
      run_expecting_error({{"image", Tensor(TensorType{DType::F32, {1, 28, 28}})}});
  EXPECT_EQ(d.message, "input 'image': expected f32[1,1,28,28], got f32[1,28,28]");
}

TEST_F(InputChecking, RejectsWrongDtype) {
  const Diagnostic d =
      run_expecting_error({{"image", Tensor(TensorType{DType::F16, {1, 1, 28, 28}})}});
  EXPECT_EQ(d.message, "input 'image': expected f32[1,1,28,28], got f16[1,1,28,28]");
}

TEST_F(InputChecking, RejectsMissingInput) {
  EXPECT_EQ(run_expecting_error({}).message, "missing input 'image'");
}

TEST_F(InputChecking, RejectsUnknownInputWithSuggestion) {
  const Diagnostic d = run_expecting_error({{"imag", Tensor(TensorType{DType::F32, {1}})}});
  EXPECT_EQ(d.location, "");
  EXPECT_EQ(d.message, "unknown input 'imag'; the graph's inputs are: image");
  EXPECT_EQ(d.notes, std::vector<std::string>{"did you mean 'image'?"});
}

TEST(ReferenceInterpreter, ParameterWithoutDataIsAnInternalError) {
  ir::Graph graph;
  ir::Value* w = graph.add_parameter("w", TensorType{DType::F32, {2}}, ir::InlineData{{1, 2}});
  graph.outputs = add_op(graph, "relu", "relu", {w})->results;
  EXPECT_THROW(run_reference(graph, {}), InternalError);
  w->data = std::make_shared<const Tensor>(f32({2}, {-1, 2}));
  expect_values(run_reference(graph, {}).at(0), {0, 2}, 0);
}

}  // namespace
}  // namespace kiln::eval
