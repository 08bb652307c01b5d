// A safetensors file (weights, and kiln's checkpoints) through compiler/safetensors.h: the header
// is validated, then every tensor is read and converted.
#include "compiler/safetensors.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      kiln::fuzz::write_scratch("input.safetensors", kiln::fuzz::as_text(data, size));
  try {
    const auto file = kiln::compiler::SafetensorsFile::open(path);
    for (const auto& [name, entry] : file.entries()) (void)file.read(name).to_doubles();
  } catch (const kiln::Error&) {
  }
  return 0;
}
