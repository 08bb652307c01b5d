#include "runtime/executor/host_executor.h"

#include <cstring>

#include "ir/diagnostic.h"

namespace kiln::runtime::host {

namespace {
void check_type(const ir::Tensor& tensor, const codegen::Buffer& buffer) {
  if (tensor.type() != buffer.type)
    throw Error("", std::string(codegen::buffer_role_name(buffer.role)) + " '" + buffer.name +
                        "': expected " + buffer.type.to_string() + ", got " +
                        tensor.type().to_string());
}
}  // namespace

std::vector<ir::Tensor> run_program(const codegen::Program& program, const HostModule& module,
                                    const std::vector<ir::Tensor>& inputs,
                                    const std::vector<ir::Tensor>& parameters,
                                    const HostOptions& options) {
  // One 256-byte aligned allocation per unplanned buffer (as cudaMalloc aligns): kernels may use
  // float4 access, and distinct allocations let the sanitizer build catch a kernel that writes
  // past its buffer.
  // Intermediates that plan-memory placed share one activation arena at their planned offsets.
  using Storage = std::unique_ptr<std::byte[], void (*)(std::byte*)>;
  auto allocate = [](int64_t size) {
    const size_t bytes = (static_cast<size_t>(size) + 255) / 256 * 256;
    return Storage(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{256})),
                   [](std::byte* p) { ::operator delete[](p, std::align_val_t{256}); });
  };
  std::vector<Storage> storage;
  Storage arena = allocate(program.arena_bytes);
  std::vector<void*> pointers;
  for (const codegen::Buffer& buffer : program.buffers) {
    if (buffer.arena_offset >= 0) {
      KILN_CHECK(buffer.arena_offset + buffer.bytes <= program.arena_bytes)
          << "buffer '" << buffer.name << "' lies outside the activation arena";
      pointers.push_back(arena.get() + buffer.arena_offset);
      continue;
    }
    storage.push_back(allocate(buffer.bytes));
    std::byte* memory = storage.back().get();
    pointers.push_back(memory);
    const std::vector<ir::Tensor>* source = nullptr;
    if (buffer.role == codegen::BufferRole::Input) source = &inputs;
    if (buffer.role == codegen::BufferRole::Parameter) source = &parameters;
    if (source == nullptr) continue;
    KILN_CHECK(buffer.index >= 0) << "buffer '" << buffer.name << "' has no index";
    if (static_cast<size_t>(buffer.index) >= source->size())
      throw Error("", std::string(codegen::buffer_role_name(buffer.role)) + " '" + buffer.name +
                          "' was not given");
    const ir::Tensor& tensor = (*source)[buffer.index];
    check_type(tensor, buffer);
    std::memcpy(memory, tensor.data(), tensor.byte_size());
  }

  std::vector<void*> args;
  for (const codegen::Kernel& kernel : program.kernels) {
    args.clear();
    for (int id : kernel.args) args.push_back(pointers.at(id));
    module.launch(kernel.name, args.data(), kernel.grid, kernel.block,
                  kernel.dynamic_shared_bytes, kernel.uses_barriers, options);
  }

  std::vector<ir::Tensor> outputs;
  for (int id : program.outputs) {
    const codegen::Buffer& buffer = program.buffers.at(id);
    std::vector<std::byte> bytes(static_cast<size_t>(buffer.bytes));
    std::memcpy(bytes.data(), pointers[id], bytes.size());
    outputs.emplace_back(buffer.type, std::move(bytes));
  }
  return outputs;
}

}  // namespace kiln::runtime::host
