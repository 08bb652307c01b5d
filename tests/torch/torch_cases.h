// The PyTorch cases written by gen_cases.py, shared by the test programs that check the
// reference interpreter (torch_diff_test) and the generated kernels (codegen_sweep_test).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::testing_support {

struct TorchCase {
  std::string name;                // "conv2d_groups_3"
  std::string op;
  ir::AttrMap attrs;
  std::vector<ir::Tensor> inputs;
  // PyTorch's float64 answer rounded to the result dtype, one tensor per result of the op.
  std::vector<ir::Tensor> expected;
};

// Reads DIR/cases.json and every .npy it names. Throws std::runtime_error on a broken manifest.
std::vector<TorchCase> load_torch_cases(const std::filesystem::path& dir);

// Adds the case to `graph` as one node whose operands are new graph inputs named
// "<prefix>in0", "<prefix>in1", ... and whose results are named "<prefix>out", "<prefix>out1",
// ... Returns the node;
// throws std::runtime_error when shape inference rejects the case.
ir::Node* add_case_node(ir::Graph& graph, const TorchCase& test_case, const std::string& prefix);

// Per-dtype relative tolerance for results that round the same exact answer once: f32 1e-5,
// f16 1e-3, bf16 1e-2, integers and bool exact. (The codegen sweep's scale-relative check.)
double rounding_tolerance(ir::DType dtype);

// An element matches when |got - want| <= atol + rtol * |want|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// The reference interpreter's tolerance for one result of `op` in `dtype`: by the op's family
// (the table in torch_cases.cpp), in units of the dtype's epsilon; integers and bool are exact.
Tolerance interpreter_tolerance(const std::string& op, ir::DType dtype);

// The name of the family `op` belongs to in that table ("rounded-once" unless listed).
std::string tolerance_family(const std::string& op);

// Element by element: |got - want| <= atol + rtol * |want|; NaN matches NaN, infinities must
// be equal. Returns an empty string when every element matches, else the worst element (the
// one furthest past its allowance). `worst_ratio` receives max |got - want| / allowance.
std::string compare_elements(const ir::Tensor& got, const ir::Tensor& want, Tolerance tolerance,
                             double* worst_ratio = nullptr);

// Compares element by element: |got - want| <= tolerance * max(1, max finite |want|); NaN
// matches NaN, infinities must match. Returns an empty string when they match, else a
// description of the worst element. `relative_error` receives the worst error / scale.
std::string compare_tensors(const ir::Tensor& got, const ir::Tensor& want, double tolerance,
                            double* relative_error = nullptr);

}  // namespace kiln::testing_support
