// The optimizer update ops: shape inference and its errors, and the reference kernels over
// three steps against closed forms (constant gradients make Adam's bias-corrected step exactly
// lr * g / (|g| + eps), whatever the betas). Broad checks against torch.optim: tests/torch/.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Tensor;
using ir::TensorType;

const TensorType kParam{DType::F32, {2, 3}};
const TensorType kStep{DType::I32, {1}};

std::vector<TensorType> infer(const std::string& op, const std::vector<TensorType>& inputs,
                              ir::AttrMap attrs) {
  const ir::OpDef* def = ir::OpRegistry::instance().find(op);
  EXPECT_NE(def, nullptr) << op;
  return ir::infer_op(*def, inputs, attrs);
}

// The OpError inference throws, or a default one (input -1, no attr, "no error").
ir::OpError infer_error(const std::string& op, const std::vector<TensorType>& inputs,
                        ir::AttrMap attrs) {
  try {
    infer(op, inputs, std::move(attrs));
  } catch (const ir::OpError& error) {
    return error;
  }
  return {"no error"};
}

TEST(OptimizerOps, ResultsAreTheUpdatedTensors) {
  EXPECT_EQ(infer("sgd_update", {kParam, kParam}, {{"lr", 0.1}}),
            std::vector<TensorType>({kParam}));
  EXPECT_EQ(infer("sgd_update", {kParam, kParam, kParam}, {{"lr", 0.1}, {"momentum", 0.9}}),
            std::vector<TensorType>({kParam, kParam}));
  const TensorType half{DType::F16, {7}};
  EXPECT_EQ(infer("adam_update", {half, half, half, half, kStep}, {{"lr", 1e-3}}),
            std::vector<TensorType>({half, half, half}));
  // A rank-0 or f32 step works too.
  EXPECT_EQ(infer("adamw_update", {kParam, kParam, kParam, kParam, TensorType{DType::F32, {}}},
                  {{"lr", 1e-3}})
                .size(),
            3u);
}

TEST(OptimizerOps, LearningRateIsRequired) {
  const ir::OpError e = infer_error("adamw_update", {kParam, kParam, kParam, kParam, kStep}, {});
  EXPECT_NE(e.message.find("lr"), std::string::npos) << e.message;
}

TEST(OptimizerOps, DefaultsAreFilledIn) {
  const ir::OpDef* adamw = ir::OpRegistry::instance().find("adamw_update");
  ir::AttrMap attrs{{"lr", 1e-3}};
  ir::infer_op(*adamw, {kParam, kParam, kParam, kParam, kStep}, attrs);
  EXPECT_EQ(std::get<double>(attrs.at("weight_decay")), 0.01);  // torch.optim.AdamW's default
  EXPECT_EQ(std::get<double>(attrs.at("beta2")), 0.999);
  const ir::OpDef* adam = ir::OpRegistry::instance().find("adam_update");
  attrs = {{"lr", 1e-3}};
  ir::infer_op(*adam, {kParam, kParam, kParam, kParam, kStep}, attrs);
  EXPECT_EQ(std::get<double>(attrs.at("weight_decay")), 0.0);
}

TEST(OptimizerOps, InferenceErrorsPointAtTheOperandOrAttribute) {
  const TensorType other{DType::F32, {3, 2}};
  const TensorType ints{DType::I32, {2, 3}};
  ir::OpError e = infer_error("sgd_update", {kParam, other}, {{"lr", 0.1}});
  EXPECT_EQ(e.input_index, 1);
  EXPECT_EQ(e.message, "grad f32[3,2] must have the same type as param f32[2,3]");
  EXPECT_EQ(infer_error("sgd_update", {ints, ints}, {{"lr", 0.1}}).input_index, 0);
  e = infer_error("sgd_update", {kParam, kParam}, {{"lr", 0.1}, {"momentum", 0.9}});
  EXPECT_EQ(e.attr, "momentum");
  EXPECT_NE(e.message.find("needs a momentum_buffer operand"), std::string::npos);
  EXPECT_EQ(infer_error("sgd_update", {kParam, kParam, kParam}, {{"lr", 0.1}}).input_index, 2);
  EXPECT_EQ(infer_error("sgd_update", {kParam, kParam, kParam},
                        {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", true}, {"dampening", 0.1}})
                .attr,
            "nesterov");
  e = infer_error("sgd_update", {kParam, kParam}, {{"lr", -0.1}});
  EXPECT_EQ(e.attr, "lr");
  EXPECT_EQ(e.message, "attribute 'lr' must be >= 0.0, got -0.1");

  EXPECT_EQ(infer_error("adam_update", {kParam, kParam, other, kParam, kStep}, {{"lr", 1e-3}})
                .input_index,
            2);
  EXPECT_EQ(infer_error("adam_update", {kParam, kParam, kParam, other, kStep}, {{"lr", 1e-3}})
                .input_index,
            3);
  e = infer_error("adam_update", {kParam, kParam, kParam, kParam, TensorType{DType::I32, {2}}},
                  {{"lr", 1e-3}});
  EXPECT_EQ(e.input_index, 4);
  EXPECT_NE(e.message.find("step must be one i32, i64 or f32 element"), std::string::npos);
  e = infer_error("adamw_update", {kParam, kParam, kParam, kParam, kStep},
                  {{"lr", 1e-3}, {"beta2", 1.0}});
  EXPECT_EQ(e.attr, "beta2");
  EXPECT_EQ(e.message, "attribute 'beta2' must be in [0.0, 1.0), got 1.0");
}

// --- reference kernels --------------------------------------------------------------------------

Tensor f32(const std::vector<double>& values) {
  return Tensor::from_doubles(TensorType{DType::F32, {static_cast<int64_t>(values.size())}}, values);
}

// Runs one update node on `operands` and returns its results.
std::vector<Tensor> step(const std::string& op, const std::vector<Tensor>& operands,
                         ir::AttrMap attrs) {
  ir::Graph graph;
  std::vector<ir::Value*> inputs;
  std::vector<TensorType> types;
  std::map<std::string, Tensor> feed;
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    inputs.push_back(graph.add_input(name, operands[i].type()));
    types.push_back(operands[i].type());
    feed.emplace(name, operands[i]);
  }
  const ir::OpDef* def = ir::OpRegistry::instance().find(op);
  const std::vector<TensorType> result_types = ir::infer_op(*def, types, attrs);
  std::vector<std::pair<std::string, TensorType>> results;
  for (size_t i = 0; i < result_types.size(); ++i)
    results.emplace_back("out" + std::to_string(i), result_types[i]);
  ir::Node* node = graph.add_node(*ir::find_op_id(op), op, inputs, attrs, results);
  node->def = def;
  graph.outputs = node->results;
  return eval::run_reference(graph, feed);
}

const std::vector<double> kP0 = {1.0, -2.0, 0.5};
const std::vector<double> kGrad = {0.3, -0.01, 2.0};

TEST(OptimizerReference, AdamWithConstantGradientStepsByLrEveryStep) {
  constexpr double kLr = 0.01, kEps = 1e-8;
  // beta1/beta2 far from 1 make an error in bias correction large, not hidden.
  const ir::AttrMap attrs{{"lr", kLr}, {"beta1", 0.5}, {"beta2", 0.75}, {"eps", kEps}};
  Tensor p = f32(kP0), m = f32({0, 0, 0}), v = f32({0, 0, 0});
  for (int t = 1; t <= 3; ++t) {
    const std::vector<Tensor> out =
        step("adam_update", {p, f32(kGrad), m, v, Tensor::from_doubles(kStep, {double(t)})}, attrs);
    p = out[0], m = out[1], v = out[2];
    for (int64_t i = 0; i < 3; ++i) {
      const double g = kGrad[i];
      // m_t = (1 - beta1^t) g and v_t = (1 - beta2^t) g^2: bias correction recovers g and g^2.
      EXPECT_NEAR(m.get(i), (1 - std::pow(0.5, t)) * g, 1e-6) << "step " << t;
      EXPECT_NEAR(v.get(i), (1 - std::pow(0.75, t)) * g * g, 1e-6) << "step " << t;
      EXPECT_NEAR(p.get(i), kP0[i] - t * kLr * g / (std::fabs(g) + kEps), 1e-6) << "step " << t;
    }
  }
}

TEST(OptimizerReference, AdamWDecaysTheParameterBeforeTheStep) {
  constexpr double kLr = 0.1, kDecay = 0.5;
  const ir::AttrMap attrs{{"lr", kLr}, {"weight_decay", kDecay}, {"eps", 0.0}};
  Tensor p = f32(kP0), m = f32({0, 0, 0}), v = f32({0, 0, 0});
  std::vector<double> want = kP0;
  for (int t = 1; t <= 3; ++t) {
    const std::vector<Tensor> out =
        step("adamw_update", {p, f32(kGrad), m, v, Tensor::from_doubles(kStep, {double(t)})}, attrs);
    p = out[0], m = out[1], v = out[2];
    for (int64_t i = 0; i < 3; ++i) {
      want[i] = want[i] * (1 - kLr * kDecay) - kLr * (kGrad[i] > 0 ? 1 : -1);
      EXPECT_NEAR(p.get(i), want[i], 1e-6) << "step " << t << " element " << i;
    }
  }
}

TEST(OptimizerReference, SgdMomentumAndNesterovSumGeometricSeries) {
  constexpr double kLr = 0.1, kMomentum = 0.5;
  for (const bool nesterov : {false, true}) {
    const ir::AttrMap attrs{{"lr", kLr}, {"momentum", kMomentum}, {"nesterov", nesterov}};
    Tensor p = f32(kP0), buffer = f32({0, 0, 0});
    double moved = 0;  // sum of the steps' d / g so far
    for (int t = 1; t <= 3; ++t) {
      const std::vector<Tensor> out = step("sgd_update", {p, f32(kGrad), buffer}, attrs);
      p = out[0], buffer = out[1];
      const double series = (1 - std::pow(kMomentum, t)) / (1 - kMomentum);  // buf_t / g
      moved += nesterov ? 1 + kMomentum * series : series;
      for (int64_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(buffer.get(i), series * kGrad[i], 1e-6) << "step " << t;
        EXPECT_NEAR(p.get(i), kP0[i] - kLr * moved * kGrad[i], 1e-6) << "step " << t;
      }
    }
  }
}

TEST(OptimizerReference, SgdWeightDecayAddsToTheGradient) {
  const std::vector<Tensor> out =
      step("sgd_update", {f32(kP0), f32(kGrad)}, {{"lr", 0.5}, {"weight_decay", 0.1}});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_NEAR(out[0].get(i), kP0[i] - 0.5 * (kGrad[i] + 0.1 * kP0[i]), 1e-6);
}

TEST(OptimizerReference, AdamStepZeroIsARunTimeError) {
  const Tensor zeros = f32({0, 0, 0});
  try {
    step("adam_update", {f32(kP0), f32(kGrad), zeros, zeros, Tensor::from_doubles(kStep, {0})},
         {{"lr", 0.1}});
    FAIL() << "step 0 was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("step must be >= 1"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace kiln
