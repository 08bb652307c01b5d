#include "compiler/kernel_report.h"

#include <fmt/format.h>

#include "runtime/compile/occupancy.h"

namespace kiln::compiler {

namespace {
const runtime::KernelResources* find_resources(const runtime::CudaBinary& binary,
                                               const std::string& kernel, const std::string& arch) {
  for (const auto& resources : binary.resources)
    if (resources.kernel == kernel && resources.arch == arch) return &resources;
  return nullptr;
}

std::string dim3_text(const codegen::Dim3& d) { return fmt::format("({},{},{})", d.x, d.y, d.z); }
}  // namespace

std::string format_kernel_table(const codegen::Program& program, const runtime::CudaBinary& binary,
                                const std::vector<std::string>& archs) {
  std::string out = fmt::format("graph @{}: {} kernels\n\n", program.graph_name, program.kernels.size());
  out += fmt::format("{:<24} {:<14} {:<14} {:>8} {:>8}", "kernel", "grid", "block", "dyn smem", "barriers");
  for (const std::string& arch : archs) out += fmt::format(" | {:>5}: {:>4} {:>5} {:>6} {:>5}", arch, "regs", "spill", "smem", "occ");
  out += "\n";
  for (const codegen::Kernel& kernel : program.kernels) {
    out += fmt::format("{:<24} {:<14} {:<14} {:>8} {:>8}", kernel.name, dim3_text(kernel.grid),
                       dim3_text(kernel.block), kernel.dynamic_shared_bytes,
                       kernel.uses_barriers ? "yes" : "no");
    for (const std::string& arch : archs) {
      const runtime::KernelResources* r = find_resources(binary, kernel.name, arch);
      if (r == nullptr) {
        out += fmt::format(" | {:>5}: {:>4} {:>5} {:>6} {:>5}", arch, "?", "?", "?", "?");
        continue;
      }
      const int smem = r->static_shared_bytes + static_cast<int>(kernel.dynamic_shared_bytes);
      const runtime::Occupancy occupancy = runtime::theoretical_occupancy(
          arch, static_cast<int>(kernel.block.count()), r->registers, smem);
      out += fmt::format(" | {:>5}: {:>4} {:>5} {:>6} {:>4.0f}%", arch, r->registers,
                         r->spill_store_bytes + r->spill_load_bytes, smem,
                         100.0 * occupancy.fraction());
    }
    out += "\n";
    std::string args;
    for (size_t i = 0; i < kernel.args.size(); ++i) {
      const codegen::Buffer& buffer = program.buffers.at(kernel.args[i]);
      args += fmt::format("{}{} ({} {})", i ? ", " : "", buffer.name,
                          codegen::buffer_role_name(buffer.role), buffer.type.to_string());
    }
    out += fmt::format("    nodes: {}; kind: {}\n    args: {}\n",
                       fmt::join(kernel.source_nodes, ", "), kernel.op_kind, args);
  }
  return out;
}

}  // namespace kiln::compiler
