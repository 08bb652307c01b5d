// The reference interpreter against PyTorch.
//
// Usage: kiln_torch_diff_test DIR [gtest flags]. DIR holds cases.json and .npy files written by
// tests/torch/gen_cases.py. Each case is one op: the program builds a one-node graph (operand
// types from the .npy files, result types from shape inference), runs the reference
// interpreter and compares with PyTorch's float64 answer rounded to the result dtype.
// One gtest per case (suite = op, test = case name), so failures are listed by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <nlohmann/json.hpp>

#include "compiler/json_attr.h"
#include "compiler/npy.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "runtime/reference/interpreter.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMinCases = 100;

// Per-dtype relative tolerance: |got - want| <= tol * max(1, max|want|). Both sides round the
// same double-precision answer once, so f32 results differ by an ulp or so; f16 carries 11
// significant bits. Integer and bool results must match exactly.
double tolerance_for(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return 1e-5;
    case ir::DType::F16: return 1e-3;
    case ir::DType::BF16: return 1e-2;
    default: return 0;
  }
}

// The worst error over all cases, relative to max(1, max|want|), printed at the end.
struct Worst {
  double error = 0;
  std::string case_name;
};
Worst g_worst;

std::string index_text(int64_t flat, const ir::Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return ir::shape_to_string(index);
}

void compare(const std::string& name, const ir::Tensor& got, const ir::Tensor& want) {
  ASSERT_EQ(got.type(), want.type())
      << name << ": result type " << got.type().to_string() << ", PyTorch's is "
      << want.type().to_string();
  // Infinities are left out of the scale, or they would excuse any error elsewhere.
  double scale = 1;
  for (int64_t i = 0; i < want.num_elements(); ++i)
    if (std::isfinite(want.get(i))) scale = std::max(scale, std::fabs(want.get(i)));
  double worst = 0;
  int64_t worst_index = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.get(i), w = want.get(i);
    // NaN matches NaN; infinities must match exactly.
    const double error = (std::isnan(g) && std::isnan(w)) || g == w ? 0
                         : std::isnan(g - w)                        ? INFINITY
                                                                    : std::fabs(g - w);
    if (error > worst) {
      worst = error;
      worst_index = i;
    }
  }
  const double relative = worst / scale;
  if (relative > g_worst.error) g_worst = {relative, name};
  EXPECT_LE(worst, tolerance_for(want.dtype()) * scale)
      << name << ": worst element " << index_text(worst_index, want.shape()) << " of "
      << want.type().to_string() << ": got " << got.get(worst_index) << ", want "
      << want.get(worst_index) << " (error " << worst << ", relative " << relative << ")";
}

void run_case(const fs::path& dir, const json& spec) {
  const std::string name = spec.at("name");
  const std::string op = spec.at("op");
  const ir::OpDef* def = ir::OpRegistry::instance().find(op);
  ASSERT_NE(def, nullptr) << name << ": op '" << op << "' is not registered";

  ir::Graph graph;
  std::map<std::string, ir::Tensor> inputs;
  std::vector<ir::Value*> operands;
  std::vector<ir::TensorType> operand_types;
  for (const json& file : spec.at("inputs")) {
    ir::Tensor tensor = compiler::read_npy((dir / file.get<std::string>()).string());
    const std::string input_name = "in" + std::to_string(operands.size());
    operands.push_back(graph.add_input(input_name, tensor.type()));
    operand_types.push_back(tensor.type());
    inputs.emplace(input_name, std::move(tensor));
  }

  ir::AttrMap attrs;
  for (const auto& [key, value] : spec.at("attrs").items()) {
    std::string why;
    std::optional<ir::Attribute> attr = compiler::attribute_from_json(value, why);
    ASSERT_TRUE(attr.has_value()) << name << ": attribute '" << key << "': " << why;
    attrs[key] = *attr;
  }
  std::vector<ir::TensorType> result_types;
  try {
    result_types = ir::infer_op(*def, operand_types, attrs);
  } catch (const ir::OpError& error) {
    FAIL() << name << ": shape inference rejected the case: " << error.message;
  }
  std::vector<std::pair<std::string, ir::TensorType>> results;
  for (size_t i = 0; i < result_types.size(); ++i)
    results.emplace_back("out" + std::to_string(i), result_types[i]);
  ir::Node* node = graph.add_node(op, name, operands, attrs, results);
  node->def = def;
  graph.outputs = node->results;

  std::vector<ir::Tensor> got;
  try {
    got = runtime::run_reference(graph, inputs);
  } catch (const Error& error) {
    FAIL() << name << ": " << error.what();
  }
  ASSERT_EQ(got.size(), 1u) << name;
  const std::string expected = (dir / spec.at("expected").get<std::string>()).string();
  compare(name, got[0], compiler::read_npy(expected));
}

class TorchCase : public testing::Test {
 public:
  TorchCase(fs::path dir, json spec) : dir_(std::move(dir)), spec_(std::move(spec)) {}
  void TestBody() override { run_case(dir_, spec_); }

 private:
  fs::path dir_;
  json spec_;
};

// A generator that writes nothing (or almost nothing) must not pass.
class CaseCount : public testing::Test {
 public:
  explicit CaseCount(size_t count) : count_(count) {}
  void TestBody() override {
    EXPECT_GE(count_, kMinCases) << "cases.json lists too few cases; is gen_cases.py broken?";
  }

 private:
  size_t count_;
};

// Every registered op is checked against PyTorch, so a new op needs cases in gen_cases.py.
class OpCoverage : public testing::Test {
 public:
  explicit OpCoverage(std::set<std::string> ops) : ops_(std::move(ops)) {}
  void TestBody() override {
    for (const ir::OpDef& def : ir::OpRegistry::instance().all())
      EXPECT_TRUE(ops_.count(def.name)) << "no PyTorch cases for op '" << def.name << "'";
  }

 private:
  std::set<std::string> ops_;
};

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::cerr << "usage: kiln_torch_diff_test DIR (DIR holds cases.json from gen_cases.py)\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  nlohmann::json manifest;
  try {
    std::ifstream in(dir / "cases.json");
    if (!in) throw std::runtime_error("cannot open " + (dir / "cases.json").string());
    manifest = nlohmann::json::parse(in);
  } catch (const std::exception& error) {
    std::cerr << "kiln_torch_diff_test: " << error.what() << "\n";
    return 1;
  }

  const size_t count = manifest.is_array() ? manifest.size() : 0;
  std::set<std::string> ops;
  for (size_t i = 0; i < count; ++i) ops.insert(manifest[i].value("op", ""));
  testing::RegisterTest("Manifest", "HasEnoughCases", nullptr, nullptr, __FILE__, __LINE__,
                        [count]() -> testing::Test* { return new kiln::CaseCount(count); });
  testing::RegisterTest("Manifest", "CoversEveryOp", nullptr, nullptr, __FILE__, __LINE__,
                        [ops]() -> testing::Test* { return new kiln::OpCoverage(ops); });
  for (size_t i = 0; i < count; ++i) {
    const nlohmann::json spec = manifest[i];
    const std::string op = spec.value("op", "unknown");
    const std::string name = spec.value("name", "case_" + std::to_string(i));
    testing::RegisterTest(
        op.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
        [dir, spec]() -> testing::Test* { return new kiln::TorchCase(dir, spec); });
  }
  const int status = RUN_ALL_TESTS();
  std::cout << "worst relative error: " << kiln::g_worst.error;
  if (!kiln::g_worst.case_name.empty()) std::cout << " (" << kiln::g_worst.case_name << ")";
  std::cout << "\n";
  return status;
}
