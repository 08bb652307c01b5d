// Textual IR through the parser (every node checked against the op registry as it is read) and
// the verifier, then printed and parsed again: the round trip must hold for any accepted text.
#include <cstdlib>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string printed;
  try {
    kiln::ir::Graph graph = kiln::ir::parse_graph(kiln::fuzz::as_text(data, size), "fuzz.ir",
                                                  kiln::fuzz::scratch_dir().string());
    kiln::ir::verify(graph);
    printed = kiln::ir::print_graph(graph);
  } catch (const kiln::Error&) {
    return 0;
  }
  // What kiln printed must parse back: a failure here is a printer/parser bug, not bad input.
  kiln::ir::Graph again = kiln::ir::parse_graph(printed, "printed.ir", kiln::fuzz::scratch_dir().string());
  kiln::ir::verify(again);
  return 0;
}
