// The op registry: lookup, suggestions, schema checking shared by every op.
#include <gtest/gtest.h>

#include "ir/op_registry.h"

namespace kiln::ir {
namespace {

TEST(OpRegistry, FindsRegisteredOps) {
  const OpRegistry& registry = OpRegistry::instance();
  ASSERT_NE(registry.find("add"), nullptr);
  EXPECT_EQ(registry.find("add")->kind, OpKind::Broadcast);
  EXPECT_EQ(registry.find("relu")->kind, OpKind::Elementwise);
  EXPECT_EQ(registry.find("no_such_op"), nullptr);
}

TEST(OpRegistry, SuggestsCloseNames) {
  const OpRegistry& registry = OpRegistry::instance();
  EXPECT_EQ(registry.suggest("rellu"), "relu");
  EXPECT_EQ(registry.suggest("sigmod"), "sigmoid");
  EXPECT_EQ(registry.suggest("qqqqqqqqqq"), std::nullopt);
}

TEST(OpRegistry, FillsDefaultsAndCoerces) {
  const OpDef& leaky = *OpRegistry::instance().find("leaky_relu");
  AttrMap attrs;
  auto types = infer_op(leaky, {TensorType{DType::F32, {2, 3}}}, attrs);
  ASSERT_EQ(types.size(), 1u);
  EXPECT_EQ(types[0].to_string(), "f32[2,3]");
  EXPECT_EQ(std::get<double>(attrs.at("alpha")), 0.01);

  AttrMap int_alpha{{"alpha", int64_t{1}}};
  infer_op(leaky, {TensorType{DType::F32, {2}}}, int_alpha);
  EXPECT_EQ(std::get<double>(int_alpha.at("alpha")), 1.0);
}

TEST(OpRegistry, RejectsUnknownAttributeWithSuggestion) {
  const OpDef& leaky = *OpRegistry::instance().find("leaky_relu");
  AttrMap attrs{{"alpah", 0.1}};
  try {
    infer_op(leaky, {TensorType{DType::F32, {2}}}, attrs);
    FAIL() << "expected OpError";
  } catch (const OpError& error) {
    EXPECT_EQ(error.message, "unknown attribute 'alpah'; did you mean 'alpha'?");
    EXPECT_EQ(error.attr, "alpah");
  }
}

TEST(OpRegistry, RejectsWrongArityAndTypes) {
  const OpDef& add = *OpRegistry::instance().find("add");
  AttrMap attrs;
  try {
    infer_op(add, {TensorType{DType::F32, {2}}}, attrs);
    FAIL();
  } catch (const OpError& error) {
    EXPECT_EQ(error.message, "expects 2 inputs, got 1");
  }
  try {
    infer_op(add, {TensorType{DType::F32, {2, 3}}, TensorType{DType::F32, {4}}}, attrs);
    FAIL();
  } catch (const OpError& error) {
    EXPECT_EQ(error.message, "shapes [2,3] and [4] cannot be broadcast together");
    EXPECT_EQ(error.input_index, 1);
  }
  AttrMap bad{{"exponent", std::string("two")}};
  try {
    infer_op(*OpRegistry::instance().find("pow"), {TensorType{DType::F32, {2}}}, bad);
    FAIL();
  } catch (const OpError& error) {
    EXPECT_EQ(error.message, "attribute 'exponent' must be a float, got a string (\"two\")");
  }
}

TEST(OpRegistry, BroadcastsLikeNumPy) {
  EXPECT_EQ(broadcast_shapes({8, 1, 6, 1}, {7, 1, 5}), (Shape{8, 7, 6, 5}));
  EXPECT_EQ(broadcast_shapes({}, {3}), (Shape{3}));
  EXPECT_EQ(broadcast_shapes({2}, {3}), std::nullopt);
}

}  // namespace
}  // namespace kiln::ir
