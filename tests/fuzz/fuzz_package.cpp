// A package (.kiln, `kiln compile`) through the whole reader: the header and its reserved bytes,
// the section table, every section's bounds and CRC-32, the manifest JSON, the programs' JSON
// (buffers, kernels, memory plan, library calls), the weights and the CUDA binaries' table.
// runtime/package/package.h.
#include "kiln/error.h"
#include "runtime/package/package.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::runtime::Package package =
        kiln::runtime::parse_package(kiln::fuzz::as_text(data, size), "fuzz.kiln");
    // A package that parses serializes again (what `kiln compile` would have written).
    (void)kiln::runtime::serialize_package(package);
  } catch (const kiln::Error&) {
  }
  return 0;
}
