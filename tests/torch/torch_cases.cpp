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
  ir::Node* node = graph.add_node(test_case.op, test_case.name, operands, attrs, results);
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
std::string index_text(int64_t flat, const ir::Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return ir::shape_to_string(index);
}
}  // namespace

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
