// Running a whole codegen::Program on the host backend.
//
// A HostExecutable owns one buffer per Program buffer (intermediates that plan-memory placed
// share one activation arena) for as long as it lives: parameters are copied in once, and a
// training step's state outputs (Program::state_updates) are copied into their parameters
// after every run, so parameters and optimizer state stay in place between steps, as they do
// in device memory on the CUDA backend.
#pragma once

#include <memory>
#include <vector>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/executor/profile.h"
#include "runtime/host/host_module.h"

namespace kiln::runtime::host {

class HostExecutable {
 public:
  // `program` and `module` must outlive the executable. `parameters` in graph order, with
  // exactly the program's types (kiln::Error otherwise, naming the parameter).
  HostExecutable(const codegen::Program& program, const HostModule& module,
                 const std::vector<ir::Tensor>& parameters, HostOptions options);
  ~HostExecutable();
  HostExecutable(const HostExecutable&) = delete;
  HostExecutable& operator=(const HostExecutable&) = delete;

  // Copies `inputs` (graph order, checked like the parameters) in, launches every kernel in
  // program order, applies the state updates and returns the outputs (Program::outputs).
  // `profile`: when given, each launch's wall time goes there. Dynamic dims (ir/dynamic_dims.h)
  // may be given any size up to their bounds.
  std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs, RunProfile* profile = nullptr);
  // The same on inputs the caller owns: copied from there straight into the buffers (a program
  // with dynamic dims copies them first, to pad them to the bounds).
  std::vector<ir::Tensor> run_views(const std::vector<ir::TensorView>& inputs);

  // The current value of parameter `index` (graph order), and replacing it (checked type).
  ir::Tensor parameter(int index) const;
  void set_parameter(int index, const ir::Tensor& value);

 private:
  // `sizes`: each symbol's size in this run (empty: the bounds), for the kernels that compute
  // only the real rows.
  std::vector<ir::Tensor> run_at_bounds(const std::vector<ir::TensorView>& inputs,
                                        const std::vector<int64_t>& sizes, RunProfile* profile);
  void poison_skipped_padding(const std::vector<int64_t>& sizes);
  struct Storage;
  class Collectives;  // the all_reduce kernels of a data-parallel step, across the ranks
  const codegen::Program& program_;
  const HostModule& module_;
  HostOptions options_;
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<Collectives> collectives_;  // null in one process
  std::vector<void*> pointers_;           // per buffer id
  std::vector<int> input_buffers_;        // buffer id per graph input
  std::vector<int> parameter_buffers_;    // buffer id per graph parameter
  bool skips_padding_ = false;            // some kernel computes the real rows only
};

// One run on a fresh executable: what `kiln run --backend=host` does.
std::vector<ir::Tensor> run_program(const codegen::Program& program, const HostModule& module,
                                    const std::vector<ir::Tensor>& inputs,
                                    const std::vector<ir::Tensor>& parameters,
                                    const HostOptions& options);

}  // namespace kiln::runtime::host
