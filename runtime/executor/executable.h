// A compiled program on one backend, with its parameters resident between runs, and the
// training step built on it.
//
// Executable hides whether the kernels run on the GPU (CUDA driver API) or on the CPU (the
// host backend runs the same CUDA source); TrainingExecutable pairs the program of a training
// step with the inference program of the same model, whose parameters it keeps in step.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/compile/kernel_cache.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/executor/profile.h"
#include "runtime/host/host_module.h"

namespace kiln::runtime {

enum class Backend { Host, Cuda };

struct ExecutableOptions {
  Backend backend = Backend::Host;
  KernelCache* cache = nullptr;  // nullptr: always compile
  bool verbose = false;          // cache misses on stderr
  host::HostOptions host;
  cuda::CudaOptions cuda;
};

class Executable {
 public:
  virtual ~Executable() = default;

  // Compiles `program` for the backend (the host C++ compiler, or NVRTC), loads it and copies
  // `parameters` (graph order) in. Throws kiln::Error (compile errors, no GPU for Cuda, a
  // parameter of the wrong type). `binary`: code already compiled for the CUDA backend (from a
  // package), loaded instead of running NVRTC; the host backend compiles the source either way.
  static std::unique_ptr<Executable> create(codegen::Program program,
                                            const std::vector<ir::Tensor>& parameters,
                                            const ExecutableOptions& options,
                                            const CudaBinary* binary = nullptr);
  // The same with the CUDA code already compiled: `binary` is required on the CUDA backend.
  // Links no NVRTC (executable_create.cpp has create()), for programs that only load packages.
  static std::unique_ptr<Executable> load(codegen::Program program,
                                          const std::vector<ir::Tensor>& parameters,
                                          const ExecutableOptions& options,
                                          const CudaBinary* binary);

  const codegen::Program& program() const { return program_; }

  // One run: inputs in graph order; returns the outputs; state outputs (next.P) become the
  // parameters of the next run (Program::state_updates).
  // `profile`: when given, each kernel's time goes there (runtime/executor/profile.h).
  virtual std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs,
                                      RunProfile* profile = nullptr) = 0;
  // A run in two halves, so that the caller can prepare the next inputs while this one runs:
  // submit() starts a run on `inputs`, collect() returns the outputs of the oldest run
  // submitted and not collected. At most two may be outstanding; run() and the parameter calls
  // need none (internal error otherwise). The CUDA backend stages the inputs in pinned memory
  // and returns from submit() once the run is enqueued; this default runs it in submit().
  virtual void submit(const std::vector<ir::Tensor>& inputs);
  // run() on inputs the caller owns (a NumPy array's memory), copied from there straight into
  // the program's buffers or the upload staging: no copy on the way in, besides the one a
  // backend needs anyway. A program with dynamic dims copies them first (to pad them).
  virtual std::vector<ir::Tensor> run_views(const std::vector<ir::TensorView>& inputs) {
    return run(ir::copies_of(inputs));
  }
  virtual std::vector<ir::Tensor> collect();
  virtual size_t pending() const { return submitted_.size(); }

  // Parameter `index` (graph order) as it is now, and replacing it.
  virtual ir::Tensor parameter(int index) = 0;
  virtual void set_parameter(int index, const ir::Tensor& value) = 0;

  // Graph index of the parameter named `name`, or -1.
  int parameter_index(const std::string& name) const;
  // Every parameter's name, in graph order.
  std::vector<std::string> parameter_names() const;

 protected:
  explicit Executable(codegen::Program program) : program_(std::move(program)) {}
  codegen::Program program_;

 private:
  std::deque<std::vector<ir::Tensor>> submitted_;  // the default submit()'s outputs
};

// A training step and the model's inference program, sharing parameters by name.
class TrainingExecutable {
 public:
  // `step`: the program of one training step (inputs: the batch then the labels; outputs: the
  // loss first, then `logits`; state outputs next.*). `eval`: the inference program (may be
  // null). Every parameter of `eval` must be one of `step`'s with the same type.
  TrainingExecutable(std::unique_ptr<Executable> step, std::unique_ptr<Executable> eval);

  struct StepResult {
    float loss = 0;
    ir::Tensor logits;  // the step's second output ([batch, classes]); empty when it has none
  };
  // One step of training on `inputs` (the step program's inputs, graph order).
  StepResult train_step(const std::vector<ir::Tensor>& inputs);
  // The same in two halves (Executable::submit): submit_step() starts a step, collect_step()
  // returns the result of the oldest one not collected. At most two outstanding; evaluate(),
  // state() and load_state() need none.
  void submit_step(const std::vector<ir::Tensor>& inputs);
  StepResult collect_step();
  size_t pending_steps() const { return step_->pending(); }
  // Runs the inference program with the current parameters (copied over from the training
  // step when it has run since the last evaluation).
  std::vector<ir::Tensor> evaluate(const std::vector<ir::Tensor>& inputs);

  // The training state, by name: the model's parameters and the optimizer's (every parameter
  // the step updates, and every parameter evaluation shares). What a checkpoint holds.
  std::map<std::string, ir::Tensor> state();
  // Restores a state(): every name must be present with its type (kiln::Error naming what is
  // missing or different; nothing is changed then); extra names are an error too.
  void load_state(const std::map<std::string, ir::Tensor>& state);
  // The training step counter ("train.step": 1 before the first step), or 0 without one.
  int64_t step_count();

 private:
  void sync_eval_parameters();
  std::vector<std::string> state_names_;          // sorted
  std::vector<std::pair<int, int>> shared_;       // (step index, eval index)
  std::unique_ptr<Executable> step_;
  std::unique_ptr<Executable> eval_;
  bool eval_stale_ = true;
};

}  // namespace kiln::runtime
