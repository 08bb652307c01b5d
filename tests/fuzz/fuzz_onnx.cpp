// An ONNX model (a serialized ModelProto) through the importer's whole path: protobuf parsing,
// the opset table, every op rule, constant folding on the reference evaluator, initializers and
// external data (which resolve inside a scratch directory), type inference and the verifier.
// compiler/import/onnx/onnx_importer.h.
#include "compiler/import/onnx/onnx_importer.h"
#include "ir/printer.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::compiler::ImportOptions options;
    options.symbolic_dim_size = 2;  // symbolic batch dims import rather than stop at the first
    kiln::ir::Graph graph = kiln::compiler::import_onnx(
        std::string(kiln::fuzz::as_text(data, size)), "fuzz.onnx",
        kiln::fuzz::scratch_dir().string(), options);
    // The printer writes inline constants as text: a 64 MiB interpolation matrix is hundreds of
    // MB of digits, which costs seconds and finds nothing; graphs holding that much skip it.
    size_t inline_values = 0;
    for (const kiln::ir::Value* parameter : graph.parameters)
      if (parameter->source)
        if (const auto* data = std::get_if<kiln::ir::InlineData>(&*parameter->source))
          inline_values += data->values.size();
    if (inline_values <= (size_t{1} << 16)) (void)kiln::ir::print_graph(graph);
  } catch (const kiln::Error&) {
  }
  return 0;
}
