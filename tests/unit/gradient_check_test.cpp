// Gradient checks: for every op with a gradient rule, over a few shapes, the autodiff pass's
// backward graph (run on the reference interpreter) against central finite differences.
//
// Both run in f64 (the reference interpreter's double precision, end to end). Each check builds
// loss = sum(op(inputs) * w) with random weights w; the finite differences perturb one element
// at a time by h = 1e-6 (relative) and evaluate the op ALONE, then form
// sum(w * (y+ - y-)) / (2h). Central differences err by O(h^2) and rounding by O(1e-16 / h),
// so a 1e-6 relative tolerance separates a wrong rule (O(1) error) from both. Inputs keep away
// from kinks (relu at 0, clip at its bounds, ties in max) where the derivative is not defined.
// An op that computes in f32 on purpose (cast to f32) gets a larger step and tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"
#include "passes/pass.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;

// Distinct: a shuffled grid of values 0.1 apart, so no two are within a finite-difference step.
// Unit: in (-0.8, 0.8) (asin, acos, atanh, tan); AboveOne: in (1.2, 3) (acosh); Mask: bool.
enum class Fill { Normal, Positive, AwayFromZero, Labels, Distinct, Unit, AboveOne, Mask };
struct Operand {
  Shape shape;
  Fill fill = Fill::Normal;
};
struct Case {
  std::string op;
  std::vector<Operand> operands;
  ir::AttrMap attrs = {};
  double step = 1e-6;       // relative finite-difference step
  double tolerance = 1e-6;  // relative to the largest gradient element
};

ir::Tensor random_tensor(const Operand& operand, std::mt19937& rng, int64_t classes) {
  const bool labels = operand.fill == Fill::Labels;
  const bool mask = operand.fill == Fill::Mask;
  ir::Tensor t(TensorType{labels ? DType::I64 : mask ? DType::Bool : DType::F64, operand.shape});
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.2, 3.0);
  std::vector<double> grid(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < grid.size(); ++i) grid[i] = 0.1 * (static_cast<double>(i) - grid.size() / 2.0);
  std::shuffle(grid.begin(), grid.end(), rng);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = normal(rng);
    if (operand.fill == Fill::Positive) v = uniform(rng);
    if (operand.fill == Fill::AwayFromZero) v = std::copysign(0.15 + std::abs(v), v);
    if (operand.fill == Fill::Distinct) v = grid[static_cast<size_t>(i)];
    if (operand.fill == Fill::Unit) v = std::uniform_real_distribution<double>(-0.8, 0.8)(rng);
    if (operand.fill == Fill::AboveOne) v = std::uniform_real_distribution<double>(1.2, 3.0)(rng);
    if (mask) v = static_cast<double>(rng() % 2);
    if (labels) v = static_cast<double>(rng() % classes);
    t.set(i, v);
  }
  return t;
}

// One node reading graph inputs in0, in1, ...; returns its first result (the one checked).
ir::Value* add_op(ir::Graph& graph, const Case& c, const std::vector<ir::Tensor>& values,
                  bool as_parameters) {
  std::vector<ir::Value*> operands;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    if (as_parameters && ir::is_floating(values[i].dtype())) {
      ir::Value* p = graph.add_parameter(name, values[i].type(), ir::InlineData{values[i].to_doubles()});
      p->data = std::make_shared<const ir::Tensor>(values[i]);
      operands.push_back(p);
    } else {
      operands.push_back(graph.add_input(name, values[i].type()));
    }
  }
  const ir::OpDef* def = ir::OpRegistry::instance().find(c.op);
  ir::AttrMap attrs = c.attrs;
  std::vector<TensorType> types;
  for (const ir::Value* v : operands) types.push_back(v->type);
  const std::vector<TensorType> results = ir::infer_op(*def, types, attrs);
  std::vector<std::pair<std::string, TensorType>> named;
  for (size_t i = 0; i < results.size(); ++i)
    named.emplace_back(i == 0 ? "y" : "y" + std::to_string(i), results[i]);
  return graph.add_node(*ir::find_op_id(c.op), "op", operands, attrs, named)->results[0];
}

ir::Value* add_node(ir::Graph& graph, const std::string& op, std::vector<ir::Value*> in,
                    ir::AttrMap attrs = {}) {
  std::vector<TensorType> types;
  for (const ir::Value* v : in) types.push_back(v->type);
  const auto results = ir::infer_op(*ir::OpRegistry::instance().find(op), types, attrs);
  return graph.add_node(*ir::find_op_id(op), graph.unique_name(op), in, attrs, {{graph.unique_name(op), results[0]}})
      ->results[0];
}

void check_gradients(const Case& c, unsigned seed) {
  SCOPED_TRACE(c.op + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t classes = c.operands[0].shape.empty() ? 1 : c.operands[0].shape.back();
  std::vector<ir::Tensor> values;
  for (const Operand& operand : c.operands) values.push_back(random_tensor(operand, rng, classes));

  // The training graph: loss = reduce_sum(op(params) * w), then autodiff.
  ir::Graph graph;
  ir::Value* y = add_op(graph, c, values, true);
  // In the dtype of the op's result (f32 for the cast-to-f32 case).
  const ir::Tensor weights =
      ir::Tensor::from_doubles(y->type, random_tensor({y->type.shape}, rng, 1).to_doubles());
  ir::Value* w = graph.add_input("w", weights.type());
  graph.outputs = {add_node(graph, "reduce_sum", {add_node(graph, "mul", {y, w})})};
  passes::PassContext context;
  ASSERT_TRUE(passes::Autodiff::run(graph, context));
  std::map<std::string, ir::Tensor> feed = {{"w", weights}};
  for (size_t i = 0; i < values.size(); ++i)
    if (!ir::is_floating(values[i].dtype())) feed.emplace("in" + std::to_string(i), values[i]);
  const std::vector<ir::Tensor> outputs = eval::run_reference(graph, feed);

  // The op alone, for finite differences.
  ir::Graph alone;
  alone.outputs = {add_op(alone, c, values, false)};
  const std::vector<double> w_values = weights.to_doubles();
  auto weighted_sum = [&](const std::vector<ir::Tensor>& in) {
    std::map<std::string, ir::Tensor> f;
    for (size_t i = 0; i < in.size(); ++i) f.emplace("in" + std::to_string(i), in[i]);
    const std::vector<double> out = eval::run_reference(alone, f)[0].to_doubles();
    double sum = 0;
    for (size_t k = 0; k < out.size(); ++k) sum += out[k] * w_values[k];
    return sum;
  };

  for (size_t i = 0; i < values.size(); ++i) {
    if (!ir::is_floating(values[i].dtype())) continue;
    const std::string name = "grad.in" + std::to_string(i);
    size_t index = 0;
    while (index < graph.output_names.size() && graph.output_names[index] != name) ++index;
    ASSERT_LT(index, graph.outputs.size()) << "no output " << name;
    const std::vector<double> analytic = outputs[index].to_doubles();
    std::vector<double> numeric(analytic.size());
    double scale = 1;
    for (int64_t k = 0; k < values[i].num_elements(); ++k) {
      std::vector<ir::Tensor> plus = values, minus = values;
      const double x = values[i].get(k), h = c.step * std::max(1.0, std::abs(x));
      plus[i].set(k, x + h);
      minus[i].set(k, x - h);
      numeric[k] = (weighted_sum(plus) - weighted_sum(minus)) / (plus[i].get(k) - minus[i].get(k));
      scale = std::max(scale, std::abs(numeric[k]));
    }
    for (size_t k = 0; k < analytic.size(); ++k)
      EXPECT_NEAR(analytic[k], numeric[k], c.tolerance * scale) << name << "[" << k << "]";
  }
}

std::vector<Case> cases() {
  const Fill P = Fill::Positive, Z = Fill::AwayFromZero, L = Fill::Labels, D = Fill::Distinct;
  std::vector<Case> all;
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum"})
    for (auto [a, b] : std::vector<std::pair<Shape, Shape>>{
             {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}}, {{4, 1, 3}, {1, 5, 1}}, {{}, {2, 3}}})
      all.push_back({op, {{a}, {b, std::string(op) == "div" ? P : Fill::Normal}}});
  const std::vector<Shape> unary_shapes = {{7}, {2, 3, 5}, {}};
  for (const Shape& s : unary_shapes) {
    for (const char* op : {"relu", "sigmoid", "tanh", "gelu", "exp", "neg", "abs", "silu",
                           "softplus", "mish", "hard_swish", "hard_sigmoid", "elu", "selu", "erf"})
      all.push_back({op, {{s, Z}}});
    for (const char* op : {"log", "sqrt", "rsqrt"}) all.push_back({op, {{s, P}}});
    for (const char* op : {"sin", "cos", "atan", "sinh", "cosh", "asinh"})
      all.push_back({op, {{s}}});
    for (const char* op : {"tan", "asin", "acos", "atanh"}) all.push_back({op, {{s, Fill::Unit}}});
    all.push_back({"acosh", {{s, Fill::AboveOne}}});
    all.push_back({"leaky_relu", {{s, Z}}, {{"alpha", 0.2}}});
    all.push_back({"gelu", {{s}}, {{"approximate", std::string("tanh")}}});
    all.push_back({"pow", {{s, P}}, {{"exponent", 2.5}}});
    all.push_back({"pow", {{s}}, {{"exponent", 3.0}}});
    all.push_back({"clip", {{s, P}}, {{"min", 0.7}, {"max", 2.1}}});
    all.push_back({"dropout", {{s}}});
    all.push_back({"cast", {{s}}, {{"to", std::string("f64")}}});
    all.push_back({"cast", {{s}}, {{"to", std::string("f32")}}, 1e-3, 2e-3});  // rounds to f32
  }
  const Fill M = Fill::Mask;
  all.push_back({"where", {{{3, 4}, M}, {{3, 4}}, {{3, 4}}}});
  all.push_back({"where", {{{2, 1, 4}, M}, {{3, 1}}, {{}}}});
  using Ints = std::vector<int64_t>;
  all.push_back({"reshape", {{{2, 3, 4}}}, {{"shape", Ints{4, -1}}}});
  all.push_back({"flatten", {{{2, 3, 4}}}});
  all.push_back({"transpose", {{{2, 3, 4}}}, {{"perm", Ints{1, 2, 0}}}});
  all.push_back({"transpose", {{{3, 5}}}});
  all.push_back({"concat", {{{2, 3}}, {{2, 5}}, {{2, 1}}}, {{"axis", int64_t{1}}}});
  all.push_back({"concat", {{{2, 3}}, {{4, 3}}}, {{"axis", int64_t{-2}}}});
  all.push_back({"slice", {{{5, 7}}}, {{"starts", Ints{1}}, {"ends", Ints{-1}}, {"axes", Ints{1}}, {"steps", Ints{2}}}});
  all.push_back({"slice", {{{4, 3, 6}}}, {{"starts", Ints{-3, 0}}, {"ends", Ints{100, 2}}}});
  // Labels draw indices below operand 0's last dim: repeats (which add up) are certain.
  all.push_back({"gather_elements", {{{3, 5}}, {{3, 7}, L}}, {{"axis", int64_t{1}}}});
  all.push_back({"gather_elements", {{{6, 4}}, {{9, 4}, L}}});
  all.push_back({"gather", {{{7, 3}}, {{4, 5}, L}}});  // an embedding: rows of a table
  all.push_back({"gather", {{{2, 5, 4}}, {{3, 2}, L}}, {{"axis", int64_t{1}}}});
  all.push_back({"broadcast_to", {{{3, 1}}}, {{"shape", Ints{2, 3, 4}}}});
  all.push_back({"broadcast_to", {{{}}}, {{"shape", Ints{5}}}});
  all.push_back({"scale", {{{2, 3}}}, {{"factor", -1.5}}});
  for (const char* op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    // reduce_max has a kink wherever two elements of a row are within a step: keep them apart.
    const Fill fill = std::string(op) == "reduce_max" ? D : Fill::Normal;
    all.push_back({op, {{{3, 4}, fill}}});
    all.push_back({op, {{{2, 3, 4}, fill}}, {{"axes", Ints{1}}}});
    all.push_back({op, {{{2, 3, 4, 5}, fill}}, {{"axes", Ints{0, -1}}, {"keepdims", true}}});
  }
  all.push_back({"bias_add", {{{2, 3, 4, 5}}, {{3}}}});
  all.push_back({"bias_add", {{{4, 6}}, {{6}}}, {{"axis", int64_t{-1}}}});
  all.push_back({"dense", {{{4, 3}}, {{5, 3}}, {{5}}}});
  all.push_back({"dense", {{{2, 3, 4}}, {{5, 4}}}});
  all.push_back({"dense", {{{3}}, {{2, 3}}, {{2}}}});
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      all.push_back({"matmul", {{ta ? Shape{2, 4, 3} : Shape{2, 3, 4}}, {tb ? Shape{5, 4} : Shape{4, 5}}},
                     {{"transpose_a", ta}, {"transpose_b", tb}}});
  all.push_back({"matmul", {{{3, 4}}, {{2, 4, 5}}}});
  for (const char* op : {"softmax", "log_softmax"}) {
    all.push_back({op, {{{3, 7}}}});
    all.push_back({op, {{{4, 3, 2}}}, {{"axis", int64_t{0}}}});
  }
  all.push_back({"global_avg_pool", {{{2, 3, 4, 5}}}});
  all.push_back({"conv2d", {{{2, 3, 5, 6}}, {{4, 3, 3, 3}}, {{4}}}});
  all.push_back({"conv2d", {{{1, 4, 7, 6}}, {{6, 2, 3, 2}}},
                 {{"stride", Ints{2, 1}}, {"pad", Ints{1, 0, 2, 1}}, {"dilation", Ints{1, 2}},
                  {"groups", int64_t{2}}}});
  // max_pool2d has a kink wherever two taps of a window are within a step: keep them apart.
  all.push_back({"max_pool2d", {{{2, 2, 5, 6}, D}}, {{"kernel", Ints{2, 2}}}});
  all.push_back({"max_pool2d", {{{1, 2, 7, 7}, D}},
                 {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 1}}, {"pad", Ints{1, 0, 0, 1}},
                  {"dilation", Ints{1, 2}}}});
  for (bool include : {true, false})
    all.push_back({"avg_pool2d", {{{2, 2, 6, 7}}},
                   {{"kernel", Ints{3, 2}}, {"stride", Ints{2, 2}}, {"pad", Ints{1, 1, 0, 1}},
                    {"count_include_pad", include}}});
  all.push_back({"layer_norm", {{{3, 7}}, {{7}}, {{7}}}});
  all.push_back({"layer_norm", {{{2, 3, 4}}, {{3, 4}}, {{3, 4}}}, {{"axis", int64_t{1}}}});
  all.push_back({"rms_norm", {{{3, 7}}, {{7}}}});
  all.push_back({"rms_norm", {{{2, 3, 4}}, {{3, 4}}}, {{"axis", int64_t{1}}, {"epsilon", 1e-3}}});
  all.push_back({"attention", {{{2, 3, 4}}, {{2, 5, 4}}, {{2, 5, 3}}}});
  all.push_back({"attention", {{{1, 2, 4, 3}}, {{1, 2, 6, 3}}, {{1, 2, 6, 2}}, {{4, 6}}},
                 {{"causal", true}, {"scale", 0.7}}});
  all.push_back({"batch_norm_train", {{{2, 3, 4, 5}}, {{3}}, {{3}}}});
  all.push_back({"batch_norm_train", {{{5, 4}}, {{4}}, {{4}}}, {{"epsilon", 1e-2}}});
  all.push_back({"softmax_cross_entropy", {{{4, 6}}, {{4}, L}}});
  all.push_back({"softmax_cross_entropy", {{{1, 3}}, {{1}, L}}});
  all.push_back({"mse_loss", {{{3, 4}}, {{3, 4}}}});
  all.push_back({"mse_loss", {{{}}, {{}}}});
  return all;
}

TEST(GradientCheck, EveryRuleAgreesWithFiniteDifferences) {
  for (const Case& c : cases())
    for (unsigned seed : {1u, 2u}) check_gradients(c, seed);
}

// Every op with a rule appears in cases() (the backward ops themselves have none).
TEST(GradientCheck, CoversEveryOpWithARule) {
  std::set<std::string> covered;
  for (const Case& c : cases()) covered.insert(c.op);
  for (const ir::OpDef& def : ir::OpRegistry::instance().all())
    if (def.grad) {
      EXPECT_TRUE(covered.count(def.name)) << "no gradient check for " << def.name;
    }
}

}  // namespace
}  // namespace kiln
