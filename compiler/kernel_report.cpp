#include "compiler/kernel_report.h"

#include <fmt/format.h>

namespace kiln::compiler {

std::optional<KernelArchFigures> kernel_arch_figures(const codegen::Kernel& kernel,
                                                     const runtime::CudaBinary& binary,
                                                     const std::string& arch) {
  for (const runtime::KernelResources& r : binary.resources) {
    if (r.kernel != kernel.function() || r.arch != arch) continue;
    KernelArchFigures figures;
    figures.registers = r.registers;
    figures.spill_bytes = r.spill_store_bytes + r.spill_load_bytes;
    figures.stack_bytes = r.stack_frame_bytes;
    figures.shared_bytes = r.static_shared_bytes + static_cast<int>(kernel.dynamic_shared_bytes);
    figures.occupancy = runtime::theoretical_occupancy(arch, static_cast<int>(kernel.block.count()),
                                                       r.registers, figures.shared_bytes);
    return figures;
  }
  return std::nullopt;
}

std::string dim3_text(const codegen::Dim3& d) { return fmt::format("({},{},{})", d.x, d.y, d.z); }

std::string format_kernel_table(const codegen::Program& program, const runtime::CudaBinary& binary,
                                const std::vector<std::string>& archs) {
  std::string out = fmt::format("graph @{}: {} kernels\n\n", program.graph_name, program.kernels.size());
  out += fmt::format("{:<24} {:<14} {:<14} {:>8} {:>8}", "kernel", "grid", "block", "dyn smem", "barriers");
  for (const std::string& arch : archs)
    out += fmt::format(" | {:>5}: {:>4} {:>5} {:>5} {:>6} {:>5}", arch, "regs", "spill", "stack", "smem", "occ");
  out += "\n";
  for (const codegen::Kernel& kernel : program.kernels) {
    out += fmt::format("{:<24} {:<14} {:<14} {:>8} {:>8}", kernel.name, dim3_text(kernel.grid),
                       dim3_text(kernel.block), kernel.dynamic_shared_bytes,
                       kernel.uses_barriers ? "yes" : "no");
    for (const std::string& arch : archs) {
      const std::optional<KernelArchFigures> f = kernel_arch_figures(kernel, binary, arch);
      if (!f) {
        out += fmt::format(" | {:>5}: {:>4} {:>5} {:>5} {:>6} {:>5}", arch, "?", "?", "?", "?", "?");
        continue;
      }
      out += fmt::format(" | {:>5}: {:>4} {:>5} {:>5} {:>6} {:>4.0f}%", arch, f->registers,
                         f->spill_bytes, f->stack_bytes, f->shared_bytes,
                         100.0 * f->occupancy.fraction());
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
    if (!kernel.entry.empty()) out += fmt::format("    launches: {} (the same code)\n", kernel.entry);
    // On the CUDA backend a library call replaces the generated kernel when the library loads.
    if (kernel.library)
      out += fmt::format("    library call: {} {} ({}), workspace {} B\n", kernel.library->library,
                         kernel.library->routine, kernel.library->descriptor,
                         kernel.library->workspace_bytes);
    // Across the processes of a data-parallel run the runtime replaces it with a collective.
    if (kernel.collective) {
      int64_t bytes = 0;
      for (size_t i = 0; i + static_cast<size_t>(kernel.num_outputs) < kernel.args.size(); ++i)
        bytes += program.buffers.at(kernel.args[i]).bytes;
      out += kernel.collective->kind == codegen::Collective::Mean
                 ? fmt::format("    all-reduce: bucket {}, {} B averaged over the ranks",
                               kernel.collective->index, bytes)
                 : fmt::format("    broadcast: {} B from rank {} to every rank", bytes,
                               kernel.collective->index);
      out += " (MPI on the host, NCCL on the GPU); one process launches this copy\n";
    }
  }
  return out;
}

}  // namespace kiln::compiler
