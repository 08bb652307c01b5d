// When a training step's collective kernels (codegen::Kernel::collective: a gradient bucket's
// mean, a broadcast of state) start and finish, apart from how they move data: the host
// executor (MPI) and the CUDA backend (NCCL) share it and keep only their transport.
//
// A collective starts at its kernel: the backend packs its operands into one buffer and starts
// the transfer. It finishes (wait, then unpack into its results) right before the first kernel
// that reads one of its results, or at the end of the step, so that in between the rest of the
// backward pass overlaps the communication.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "codegen/program.h"

namespace kiln::runtime::distributed {

class CollectiveSchedule {
 public:
  struct Collective {
    size_t kernel = 0;
    codegen::Collective what;
    std::vector<int> operands;  // buffer ids, packed in this order
    std::vector<int> results;   // buffer ids: results[i] receives operands[i]'s part
    std::vector<int64_t> sizes;  // bytes of operands[i] (and of results[i])
    int64_t bytes = 0;          // of the packed operands
    ir::DType dtype = ir::DType::F32;  // of every operand of a mean (a bucket holds one dtype)
  };

  explicit CollectiveSchedule(const codegen::Program& program);

  // The program's collective kernels, by kernel index.
  const std::map<size_t, Collective>& collectives() const { return collectives_; }
  const Collective* find(size_t kernel) const;

  // Kernel `kernel` has started its collective.
  void started(size_t kernel) { pending_.insert(kernel); }
  // The started collectives that must finish before kernel `kernel` runs (it reads one of their
  // results); they are no longer pending.
  std::vector<size_t> due_before(size_t kernel);
  // Every started collective, at the end of a step; none is pending after.
  std::vector<size_t> due_at_end();
  bool any_pending() const { return !pending_.empty(); }

 private:
  const codegen::Program& program_;
  std::map<size_t, Collective> collectives_;
  std::map<int, size_t> reader_of_;  // a result's buffer id -> its collective kernel
  std::set<size_t> pending_;          // started, not yet finished
};

}  // namespace kiln::runtime::distributed
