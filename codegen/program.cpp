// The program's data model (codegen/program.h, codegen/library_call.h): what emit writes and a
// package stores. Apart from emit, so that readers of programs (runtime/package, its fuzz
// harness) need none of the code generator.
#include "codegen/program.h"

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

std::string_view library_activation_name(LibraryActivation activation) {
  switch (activation) {
    case LibraryActivation::None: return "none";
    case LibraryActivation::Relu: return "relu";
    case LibraryActivation::GeluTanh: return "gelu_tanh";
  }
  return "?";
}

}  // namespace kiln::codegen
