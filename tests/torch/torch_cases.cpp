#include "tests/torch/torch_cases.h"

#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "compiler/json_attr.h"
#include "compiler/npy.h"
#include "ir/op_registry.h"

namespace kiln::testing_support {

namespace fs = std::filesystem;

std::vector<TorchCase> load_torch_cases(const fs::path& dir) {
  std::ifstream in(dir / "cases.json");
  if (!in) throw std::runtime_error("cannot open " + (dir / "cases.json").string());
  const nlohmann::json manifest = nlohmann::json::parse(in);
  if (!manifest.is_array()) throw std::runtime_error("cases.json is not a list");
  std::vector<TorchCase> cases;
  for (const nlohmann::json& spec : manifest) {
    TorchCase test_case;
    test_case.name = spec.at("name");
    test_case.op = spec.at("op");
    for (const auto& [key, value] : spec.at("attrs").items()) {
      std::string why;
      auto attr = compiler::attribute_from_json(value, why);
      if (!attr) throw std::runtime_error(test_case.name + ": attribute '" + key + "': " + why);
      test_case.attrs[key] = *attr;
    }
    for (const nlohmann::json& file : spec.at("inputs"))
      test_case.inputs.push_back(compiler::read_npy((dir / file.get<std::string>()).string()));
    // One file, or a list of files for a multi-result op (gen_cases.py).
    const nlohmann::json& expected = spec.at("expected");
    for (const nlohmann::json& file : expected.is_array() ? expected : nlohmann::json::array({expected}))
      test_case.expected.push_back(compiler::read_npy((dir / file.get<std::string>()).string()));
    cases.push_back(std::move(test_case));
  }
  return cases;
}

ir::Node* add_case_node(ir::Graph& graph, const TorchCase& test_case, const std::string& prefix) {
  const ir::OpDef* def = ir::OpRegistry::instance().find(test_case.op);
  if (def == nullptr) throw std::runtime_error(test_case.name + ": op '" + test_case.op + "' is not registered");
  std::vector<ir::Value*> operands;
  std::vector<ir::TensorType> types;
  for (const ir::Tensor& input : test_case.inputs) {
    operands.push_back(graph.add_input(prefix + "in" + std::to_string(operands.size()), input.type()));
    types.push_back(input.type());
  }
  ir::AttrMap attrs = test_case.attrs;
  std::vector<ir::TensorType> result_types;
  try {
    result_types = ir::infer_op(*def, types, attrs);
  } catch (const ir::OpError& error) {
    throw std::runtime_error(test_case.name + ": shape inference rejected the case: " + error.message);
  }
  std::vector<std::pair<std::string, ir::TensorType>> results;
  for (size_t i = 0; i < result_types.size(); ++i)
    results.emplace_back(prefix + (i ? "out" + std::to_string(i) : "out"), result_types[i]);
  ir::Node* node = graph.add_node(*ir::find_op_id(test_case.op), test_case.name, operands, attrs, results);
  node->def = def;
  return node;
}

double rounding_tolerance(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return 1e-5;
    case ir::DType::F16: return 1e-3;
    case ir::DType::BF16: return 1e-2;
    default: return 0;
  }
}

namespace {

// The oracle and the interpreter both compute in float64 from the same inputs and round once to
// the result dtype, so a correct result is the correctly rounded answer or its neighbour: 2 ulps
// relative (rtol in units of the dtype's epsilon), plus an absolute floor far below any real
// error for answers that cancel to about zero (float64 noise of the order 1e-16 * the terms).
// A family is one line: its name, rtol in epsilons, atol in epsilons, its ops. Ops not listed
// are "rounded-once"; integer and bool results are always exact.
struct Family {
  const char* name;
  double rtol_eps;
  double atol_eps;
  std::vector<std::string> ops;
};
const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      // The answer is an input element (or zero, or a cast of one): bit for bit.
      {"exact", 0, 0, {"abs", "broadcast_to", "cast", "clip", "concat", "dropout", "flatten",
                       "max_pool2d", "maximum", "minimum", "neg", "relu", "relu_grad", "reshape",
                       "slice", "slice_grad", "transpose", "reduce_max"}},
      // Backward ops that read the forward's output rounded to f32 (the oracle differentiates
      // the exact forward): off by about an epsilon of |dy| where 1 - y^2 or the like cancels.
      // Worst measured: 0.5 eps (tanh_grad_saturated).
      {"activation-grad", 2, 4, {"sigmoid_grad", "tanh_grad", "softmax_grad", "log_softmax_grad"}},
      // Reads the batch mean and variance rounded to f32; dscale and dbias sum over the batch.
      // Worst measured: 4.5 eps (batch_norm_train_grad_n1's dscale, 0.57).
      {"batch-norm-grad", 2, 32, {"batch_norm_train_grad"}},
      {"rounded-once", 2, 1e-5, {}},
  };
  return table;
}

const Family& family_of(const std::string& op) {
  for (const Family& family : families())
    for (const std::string& name : family.ops)
      if (name == op) return family;
  return families().back();
}

double epsilon(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return 0x1p-23;
    case ir::DType::F16: return 0x1p-10;
    case ir::DType::BF16: return 0x1p-7;
    default: return 0;
  }
}

std::string index_text(int64_t flat, const ir::Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return ir::shape_to_string(index);
}
}  // namespace

std::string tolerance_family(const std::string& op) { return family_of(op).name; }

Tolerance interpreter_tolerance(const std::string& op, ir::DType dtype) {
  const Family& family = family_of(op);
  return {family.atol_eps * epsilon(dtype), family.rtol_eps * epsilon(dtype)};
}

std::string compare_elements(const ir::Tensor& got, const ir::Tensor& want, Tolerance tolerance,
                             double* worst_ratio) {
  if (got.type() != want.type())
    return "result type " + got.type().to_string() + ", expected " + want.type().to_string();
  double worst = 0;  // |got - want| / allowance, the furthest past it
  int64_t worst_index = -1;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if ((std::isnan(g) && std::isnan(w)) || g == w) continue;
    const double error = std::isnan(g - w) || std::isinf(g - w) ? INFINITY : std::fabs(g - w);
    const double allowed = tolerance.atol + tolerance.rtol * std::fabs(w);
    const double ratio = allowed > 0 ? error / allowed : INFINITY;
    if (worst_index < 0 || ratio > worst) {
      worst = ratio;
      worst_index = i;
    }
  }
  if (worst_ratio) *worst_ratio = worst;
  if (worst <= 1) return {};
  const double w = want.get(worst_index);
  return fmt::format("worst element {} of {}: got {}, want {} (error {:.3g}, allowed {:.3g} = "
                     "atol {:.3g} + rtol {:.3g} * |want|)",
                     index_text(worst_index, want.shape()), want.type().to_string(),
                     got.get(worst_index), w, std::fabs(got.get(worst_index) - w),
                     tolerance.atol + tolerance.rtol * std::fabs(w), tolerance.atol, tolerance.rtol);
}

std::string compare_tensors(const ir::Tensor& got, const ir::Tensor& want, double tolerance,
                            double* relative_error) {
  if (got.type() != want.type())
    return "result type " + got.type().to_string() + ", expected " + want.type().to_string();
  // Infinities are left out of the scale, or they would excuse any error elsewhere.
  double scale = 1;
  for (int64_t i = 0; i < want.num_elements(); ++i)
    if (std::isfinite(want.get(i))) scale = std::max(scale, std::fabs(want.get(i)));
  double worst = 0;
  int64_t worst_index = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.get(i), w = want.get(i);
    const double error = (std::isnan(g) && std::isnan(w)) || g == w ? 0
                         : std::isnan(g - w)                        ? INFINITY
                                                                    : std::fabs(g - w);
    if (error > worst) {
      worst = error;
      worst_index = i;
    }
  }
  if (relative_error) *relative_error = worst / scale;
  if (worst <= tolerance * scale) return {};
  return fmt::format("worst element {} of {}: got {}, want {} (error {:.3g}, relative {:.3g}, allowed {:.3g})",
                     index_text(worst_index, want.shape()), want.type().to_string(),
                     got.get(worst_index), want.get(worst_index), worst, worst / scale, tolerance);
}

}  // namespace kiln::testing_support
