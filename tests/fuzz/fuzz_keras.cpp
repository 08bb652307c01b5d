// A Keras model (model JSON or a TensorFlow.js model.json) through the importer's whole path:
// JSON parsing, the topology's spellings, every layer converter, the layout bookkeeping,
// initializers, weight manifests (whose shards resolve inside a scratch directory), type
// inference and the verifier. compiler/import/keras/keras_importer.h.
#include "compiler/import/keras/keras_importer.h"
#include "ir/printer.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::compiler::ImportOptions options;
    options.symbolic_dim_size = 2;
    kiln::ir::Graph graph = kiln::compiler::import_keras(kiln::fuzz::as_text(data, size), "fuzz.json",
                                                         kiln::fuzz::scratch_dir().string(), options);
    (void)kiln::ir::print_graph(graph);
  } catch (const kiln::Error&) {
  }
  return 0;
}
