// The program's data model (codegen/program.h, codegen/library_call.h): what emit writes and a
// package stores. Apart from emit, so that readers of programs (runtime/package, its fuzz
// harness) need none of the code generator.
#include "codegen/program.h"

#include <algorithm>

#include "codegen/library_call.h"
#include "ir/diagnostic.h"

namespace kiln::codegen {

std::string_view buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::Input: return "input";
    case BufferRole::Parameter: return "parameter";
    case BufferRole::Intermediate: return "intermediate";
    case BufferRole::Output: return "output";
  }
  return "?";
}

HostExecution host_execution(const Kernel& kernel) {
  if (kernel.host_variant) return HostExecution::LoopNest;
  return kernel.uses_barriers ? HostExecution::Fibers : HostExecution::PlainLoop;
}

std::string_view host_execution_name(HostExecution execution) {
  switch (execution) {
    case HostExecution::LoopNest: return "loop nest";
    case HostExecution::PlainLoop: return "plain loop";
    case HostExecution::Fibers: return "fibers";
  }
  return "?";
}

Dim3 launch_grid(const Kernel& kernel, const std::vector<ir::DimSymbol>& symbols,
                 const std::vector<int64_t>& sizes) {
  if (kernel.dynamic_symbol < 0 || sizes.empty()) return kernel.grid;
  const auto symbol = static_cast<size_t>(kernel.dynamic_symbol);
  const uint64_t size = static_cast<uint64_t>(sizes.at(symbol));
  const uint64_t bound = static_cast<uint64_t>(symbols.at(symbol).bound);
  Dim3 grid = kernel.grid;
  uint32_t& blocks = kernel.dynamic_grid_axis == 0 ? grid.x : kernel.dynamic_grid_axis == 1 ? grid.y : grid.z;
  // Blocks walk the rows in order and evenly: the first ceil(blocks × size / bound) cover the
  // real ones.
  blocks = static_cast<uint32_t>(std::max<uint64_t>(1, (uint64_t{blocks} * size + bound - 1) / bound));
  return grid;
}

const Kernel* Program::find_kernel(std::string_view name) const {
  for (const Kernel& kernel : kernels)
    if (kernel.name == name) return &kernel;
  return nullptr;
}

std::vector<int> Program::buffer_ids(BufferRole role) const {
  std::vector<int> ids;
  for (size_t id = 0; id < buffers.size(); ++id) {
    const Buffer& buffer = buffers[id];
    if (buffer.role != role) continue;
    KILN_CHECK(buffer.index >= 0) << "buffer '" << buffer.name << "' has no index";
    if (static_cast<size_t>(buffer.index) >= ids.size())
      ids.resize(static_cast<size_t>(buffer.index) + 1, -1);
    KILN_CHECK(ids[buffer.index] == -1)
        << "buffers '" << buffers[ids[buffer.index]].name << "' and '" << buffer.name
        << "' have the same index " << buffer.index;
    ids[buffer.index] = static_cast<int>(id);
  }
  for (size_t index = 0; index < ids.size(); ++index)
    KILN_CHECK(ids[index] != -1) << "no buffer has index " << index;
  return ids;
}

std::string_view conv_direction_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward: return "forward";
    case ConvDirection::BackwardData: return "backward_data";
    case ConvDirection::BackwardFilter: return "backward_filter";
  }
  return "?";
}

std::string_view library_activation_name(LibraryActivation activation) {
  switch (activation) {
    case LibraryActivation::None: return "none";
    case LibraryActivation::Relu: return "relu";
    case LibraryActivation::GeluTanh: return "gelu_tanh";
  }
  return "?";
}

}  // namespace kiln::codegen
