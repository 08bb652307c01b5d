// A model file (JSON) through the frontend's whole path: parsing, validation of every field,
// type inference of every node, parameter sources (weights files resolve inside a scratch
// directory), and the verifier. compiler/json_frontend.h.
#include "compiler/json_frontend.h"
#include "ir/printer.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::ir::Graph graph = kiln::compiler::parse_json_model(
        kiln::fuzz::as_text(data, size), "fuzz.json", kiln::fuzz::scratch_dir().string());
    // A verified graph prints (the printer must accept whatever the frontend accepts).
    (void)kiln::ir::print_graph(graph);
  } catch (const kiln::Error&) {
  }
  return 0;
}
