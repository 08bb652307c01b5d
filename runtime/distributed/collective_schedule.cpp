#include "runtime/distributed/collective_schedule.h"

#include "ir/diagnostic.h"

namespace kiln::runtime::distributed {

CollectiveSchedule::CollectiveSchedule(const codegen::Program& program) : program_(program) {
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const codegen::Kernel& kernel = program.kernels[k];
    if (!kernel.collective) continue;
    const size_t operands = kernel.args.size() - static_cast<size_t>(kernel.num_outputs);
    KILN_CHECK(operands * 2 == kernel.args.size())
        << kernel.name << ": a collective has one result per operand";
    Collective collective;
    collective.kernel = k;
    collective.what = *kernel.collective;
    collective.dtype = program.buffers[kernel.args.at(0)].type.dtype;
    for (size_t i = 0; i < operands; ++i) {
      const int operand = kernel.args[i], result = kernel.args[operands + i];
      KILN_CHECK(collective.what.kind == codegen::Collective::Broadcast ||
                 program.buffers[operand].type.dtype == collective.dtype)
          << kernel.name << ": a bucket holds one dtype";
      collective.operands.push_back(operand);
      collective.results.push_back(result);
      collective.sizes.push_back(program.buffers[operand].bytes);
      collective.bytes += program.buffers[operand].bytes;
      reader_of_.emplace(result, k);
    }
    collectives_.emplace(k, std::move(collective));
  }
}

const CollectiveSchedule::Collective* CollectiveSchedule::find(size_t kernel) const {
  const auto it = collectives_.find(kernel);
  return it == collectives_.end() ? nullptr : &it->second;
}

std::vector<size_t> CollectiveSchedule::due_before(size_t kernel) {
  std::vector<size_t> due;
  if (pending_.empty()) return due;
  const codegen::Kernel& reader = program_.kernels[kernel];
  const size_t operands = reader.args.size() - static_cast<size_t>(reader.num_outputs);
  for (size_t i = 0; i < operands; ++i) {
    const auto it = reader_of_.find(reader.args[i]);
    if (it != reader_of_.end() && pending_.erase(it->second) > 0) due.push_back(it->second);
  }
  return due;
}

std::vector<size_t> CollectiveSchedule::due_at_end() {
  std::vector<size_t> due(pending_.begin(), pending_.end());
  pending_.clear();
  return due;
}

}  // namespace kiln::runtime::distributed
