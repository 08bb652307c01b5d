// A .npy file through compiler/npy.h's reader (header, dtype, shape, data size, conversion).
#include "compiler/npy.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_scratch("input.npy", kiln::fuzz::as_text(data, size));
  try {
    kiln::ir::Tensor tensor = kiln::compiler::read_npy(path);
    (void)tensor.to_doubles();
  } catch (const kiln::Error&) {
  }
  return 0;
}
