// The reference interpreter against PyTorch.
//
// Usage: kiln_torch_diff_test DIR [gtest flags]. DIR holds cases.json and .npy files written by
// tests/torch/gen_cases.py. Each case is one op: the program builds a one-node graph (operand
// types from the .npy files, result types from shape inference), runs the reference
// interpreter and compares with PyTorch's float64 answer rounded to the result dtype, element by
// element, within the tolerance of the op's family (torch_cases.cpp: 2 ulps for most ops, exact
// for data movement).
// One gtest per case (suite = op, test = case name), so failures are listed by name.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"
#include "tests/torch/torch_cases.h"

namespace kiln {
namespace {

using testing_support::TorchCase;

// Every case gen_cases.py writes: a generator that silently drops some must not pass. Update
// this when cases are added or removed (the failure message says the count it found).
constexpr size_t kCases = 775;

// The worst error over all cases, as a fraction of its allowance, printed at the end.
struct Worst {
  double error = 0;
  std::string case_name;
};
Worst g_worst;

void run_case(const TorchCase& test_case) {
  ir::Graph graph;
  ir::Node* node = nullptr;
  try {
    node = testing_support::add_case_node(graph, test_case, "");
  } catch (const std::exception& error) {
    FAIL() << error.what();
  }
  graph.outputs = node->results;
  std::map<std::string, ir::Tensor> inputs;
  for (size_t i = 0; i < test_case.inputs.size(); ++i)
    inputs.emplace("in" + std::to_string(i), test_case.inputs[i]);

  std::vector<ir::Tensor> got;
  try {
    got = eval::run_reference(graph, inputs);
  } catch (const Error& error) {
    FAIL() << test_case.name << ": " << error.what();
  }
  ASSERT_EQ(got.size(), test_case.expected.size()) << test_case.name;
  for (size_t i = 0; i < got.size(); ++i) {
    const ir::Tensor& want = test_case.expected[i];
    double ratio = 0;
    const std::string mismatch = testing_support::compare_elements(
        got[i], want, testing_support::interpreter_tolerance(test_case.op, want.dtype()), &ratio);
    if (ratio > g_worst.error) g_worst = {ratio, test_case.name};
    EXPECT_TRUE(mismatch.empty()) << test_case.name << " result " << i << " (tolerance family "
                                  << testing_support::tolerance_family(test_case.op)
                                  << "): " << mismatch;
  }
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::cerr << "usage: kiln_torch_diff_test DIR (DIR holds cases.json from gen_cases.py)\n";
    return 2;
  }
  std::vector<kiln::testing_support::TorchCase> cases;
  try {
    cases = kiln::testing_support::load_torch_cases(argv[1]);
  } catch (const std::exception& error) {
    std::cerr << "kiln_torch_diff_test: " << error.what() << "\n";
    return 1;
  }

  // A generator that drops cases must not pass, and every registered op needs PyTorch cases.
  const size_t count = cases.size();
  std::set<std::string> ops;
  for (const auto& test_case : cases) ops.insert(test_case.op);
  testing::RegisterTest("Manifest", "HasEveryCase", nullptr, nullptr, __FILE__, __LINE__,
                        [count]() -> testing::Test* {
                          struct T : testing::Test {
                            size_t n;
                            explicit T(size_t n) : n(n) {}
                            void TestBody() override {
                              EXPECT_EQ(n, kiln::kCases)
                                  << "cases.json lists " << n << " cases, gen_cases.py writes "
                                  << kiln::kCases << " (update kCases if cases were added)";
                            }
                          };
                          return new T(count);
                        });
  testing::RegisterTest("Manifest", "CoversEveryOp", nullptr, nullptr, __FILE__, __LINE__,
                        [ops]() -> testing::Test* {
                          struct T : testing::Test {
                            std::set<std::string> ops;
                            explicit T(std::set<std::string> ops) : ops(std::move(ops)) {}
                            void TestBody() override {
                              for (const auto& def : kiln::ir::OpRegistry::instance().all()) {
                                // A fused kernel computes its body's ops, which have cases.
                                if (def.id == kiln::ir::OpId::Kernel) continue;
                                EXPECT_TRUE(ops.count(def.name)) << "no PyTorch cases for op '" << def.name << "'";
                              }
                            }
                          };
                          return new T(ops);
                        });
  for (const auto& test_case : cases) {
    testing::RegisterTest(test_case.op.c_str(), test_case.name.c_str(), nullptr, nullptr, __FILE__,
                          __LINE__, [test_case]() -> testing::Test* {
                            struct T : testing::Test {
                              kiln::testing_support::TorchCase c;
                              explicit T(kiln::testing_support::TorchCase c) : c(std::move(c)) {}
                              void TestBody() override { kiln::run_case(c); }
                            };
                            return new T(test_case);
                          });
  }
  const int status = RUN_ALL_TESTS();
  std::cout << "worst error, as a fraction of its allowance: " << kiln::g_worst.error;
  if (!kiln::g_worst.case_name.empty()) std::cout << " (" << kiln::g_worst.case_name << ")";
  std::cout << "\n";
  return status;
}
