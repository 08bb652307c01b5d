#include "runtime/cuda/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {
namespace {

int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// The digits and the suffix letter of "sm_90a" / "compute_100f" ('\0' when none).
struct ParsedArch {
  int number = 0;
  char suffix = '\0';
};

std::optional<ParsedArch> parse_arch(std::string_view arch) {
  for (std::string_view prefix : {"sm_", "compute_"}) {
    if (!arch.starts_with(prefix)) continue;
    std::string_view rest = arch.substr(prefix.size());
    ParsedArch parsed;
    auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), parsed.number);
    if (error != std::errc() || end == rest.data() || parsed.number <= 0) return std::nullopt;
    std::string_view suffix(end, rest.data() + rest.size() - end);
    if (suffix.size() > 1 || (suffix.size() == 1 && suffix != "a" && suffix != "f"))
      return std::nullopt;
    if (suffix.size() == 1) parsed.suffix = suffix[0];
    return parsed;
  }
  return std::nullopt;
}

// Whether a device can JIT-compile PTX of `ptx_arch` (CUDA programming guide, "Binary
// Compatibility" and "Feature Availability").
bool ptx_runs_on(std::string_view ptx_arch, int device_sm) {
  std::optional<ParsedArch> parsed = parse_arch(ptx_arch);
  // An unknown arch string: let the driver decide (it fails with a clear CUresult).
  if (!parsed) return true;
  switch (parsed->suffix) {
    case 'a':
      return device_sm == parsed->number;
    case 'f':
      return device_sm / 10 == parsed->number / 10 && device_sm >= parsed->number;
    default:
      return device_sm >= parsed->number;
  }
}


}  // namespace

ArenaLayout plan_arena(const std::vector<codegen::Buffer>& buffers, int64_t workspace_bytes) {
  ArenaLayout layout;
  layout.offsets.reserve(buffers.size());
  int64_t end = 0;
  for (const codegen::Buffer& buffer : buffers) {
    KILN_CHECK(buffer.bytes >= 0) << "buffer '" << buffer.name << "' has " << buffer.bytes
                                  << " bytes";
    if (buffer.arena_offset >= 0) {
      layout.offsets.push_back(-1);  // placed below, in the activation region
      continue;
    }
    int64_t offset = align_up(end, kArenaAlignment);
    // Real sizes are far below this (kMaxElements * 8 bytes per buffer); it keeps the sum exact.
    KILN_CHECK(buffer.bytes <= INT64_MAX / 2 - offset) << "arena size overflows";
    layout.offsets.push_back(offset);
    end = offset + buffer.bytes;
  }
  // Intermediates placed by plan-memory: one region after everything else, at their planned
  // offsets (which already share space between buffers whose lifetimes do not overlap).
  const int64_t activations = align_up(end, kArenaAlignment);
  for (size_t id = 0; id < buffers.size(); ++id) {
    const codegen::Buffer& buffer = buffers[id];
    if (buffer.arena_offset < 0) continue;
    KILN_CHECK(buffer.arena_offset % kArenaAlignment == 0) << "unaligned arena offset";
    layout.offsets[id] = activations + buffer.arena_offset;
    end = std::max(end, layout.offsets[id] + buffer.bytes);
  }
  // Library workspace last: "workspace comes from the planned arena", never from a separate
  // allocation, so CUDA graph capture sees fixed addresses and nothing is allocated per run.
  KILN_CHECK(workspace_bytes >= 0 && workspace_bytes <= INT64_MAX / 4) << "workspace size";
  if (workspace_bytes > 0) {
    layout.workspace_offset = align_up(end, kArenaAlignment);
    layout.workspace_bytes = align_up(workspace_bytes, kArenaAlignment);
    end = layout.workspace_offset + layout.workspace_bytes;
  }
  layout.total_bytes = align_up(end, kArenaAlignment);
  return layout;
}

int64_t library_workspace_bytes(const codegen::Program& program,
                                const codegen::LibrarySelection& usable) {
  int64_t bytes = 0;
  for (const codegen::Kernel& kernel : program.kernels) {
    if (!kernel.library || !kernel.library->selected_by(usable)) continue;
    KILN_CHECK(kernel.library->workspace_bytes >= 0) << "kernel '" << kernel.name << "' workspace";
    bytes = std::max(bytes, kernel.library->workspace_bytes);
  }
  return align_up(bytes, kArenaAlignment);
}

std::optional<int> arch_number(std::string_view arch) {
  std::optional<ParsedArch> parsed = parse_arch(arch);
  if (!parsed) return std::nullopt;
  return parsed->number;
}

std::optional<CodeChoice> select_code(const CudaBinary& binary, int device_sm) {
  std::string device_arch = fmt::format("sm_{}", device_sm);
  if (binary.cubins.contains(device_arch)) return CodeChoice{CodeKind::Cubin, device_arch};
  if (!binary.ptx.empty() && ptx_runs_on(binary.ptx_arch, device_sm))
    return CodeChoice{CodeKind::Ptx, binary.ptx_arch};
  return std::nullopt;
}

std::string describe_code(const CudaBinary& binary) {
  std::vector<std::string> parts;
  if (!binary.cubins.empty()) {
    std::vector<std::string> archs;
    for (const auto& [arch, cubin] : binary.cubins) archs.push_back(arch);
    parts.push_back(fmt::format("cubins for {}", fmt::join(archs, ", ")));
  }
  if (!binary.ptx.empty())
    parts.push_back(fmt::format("PTX for {}", binary.ptx_arch.empty() ? "an unknown arch"
                                                                      : binary.ptx_arch));
  if (parts.empty()) return "no code";
  return fmt::format("{}", fmt::join(parts, " and "));
}

ProgramBindings bind_program(const codegen::Program& program) {
  ProgramBindings bindings;
  bindings.inputs = program.buffer_ids(codegen::BufferRole::Input);
  bindings.parameters = program.buffer_ids(codegen::BufferRole::Parameter);
  const int num_buffers = static_cast<int>(program.buffers.size());
  for (int id : program.outputs)
    KILN_CHECK(id >= 0 && id < num_buffers) << "graph output is buffer " << id;
  bindings.outputs = program.outputs;
  for (const codegen::Buffer& buffer : program.buffers) {
    KILN_CHECK(buffer.bytes == ir::num_elements(buffer.type.shape) *
                                   static_cast<int64_t>(ir::dtype_size(buffer.type.dtype)))
        << "buffer '" << buffer.name << "' of type " << buffer.type.to_string() << " has "
        << buffer.bytes << " bytes";
  }
  for (const codegen::Kernel& kernel : program.kernels) {
    for (int id : kernel.args)
      KILN_CHECK(id >= 0 && id < num_buffers) << "kernel '" << kernel.name << "' arg " << id;
    KILN_CHECK(kernel.grid.count() > 0 && kernel.block.count() > 0)
        << "kernel '" << kernel.name << "' has an empty grid or block";
  }
  return bindings;
}

void check_tensors(const codegen::Program& program, std::string_view what,
                   const std::vector<int>& buffer_ids, const std::vector<ir::TensorView>& tensors) {
  if (tensors.size() != buffer_ids.size()) {
    throw Error("", fmt::format("CUDA backend: graph '{}' takes {} {}{}, got {}",
                                program.graph_name, buffer_ids.size(), what,
                                buffer_ids.size() == 1 ? "" : "s", tensors.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const codegen::Buffer& buffer = program.buffers[buffer_ids[i]];
    if (tensors[i].type == buffer.type) {
      // A view's bytes always match its type; this guards the copy below it, not the user.
      KILN_CHECK(static_cast<int64_t>(tensors[i].byte_size()) == buffer.bytes);
      continue;
    }
    throw Error("", fmt::format("CUDA backend: {} '{}': expected {}, got {}", what, buffer.name,
                                buffer.type.to_string(), tensors[i].type.to_string()));
  }
}

}  // namespace kiln::runtime::cuda
