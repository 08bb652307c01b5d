// An inference request of `kiln serve` through compiler/serve/infer_protocol.h: the JSON (depth,
// fields, datatypes, shapes against a model's, flat or nested data, value ranges) and the
// binary tensor data extension; a request that parses is answered with encode_infer_response.
// Input: a request body. When its first byte is not '{', the first two bytes (little-endian)
// are the Inference-Header-Content-Length and the rest is the body.
#include "compiler/serve/infer_protocol.h"
#include "kiln/error.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// Every kind of input a served model has: a dynamic leading dim, a static one, bool, ints.
const kiln::serve::ModelSignature& model() {
  using kiln::ir::DType;
  static const kiln::serve::ModelSignature signature{
      "m",
      {{"x", DType::F32, {4, 3}, {true, false}},
       {"mask", DType::Bool, {2}, {false}},
       {"ids", DType::I64, {2, 2}, {false, false}},
       {"h", DType::F16, {1}, {false}},
       {"u", DType::U8, {2}, {false}}},
      {{"y", DType::F32, {4, 2}, {true, false}}, {"n", DType::I32, {1}, {false}}}};
  return signature;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body = kiln::fuzz::as_text(data, size);
  std::optional<size_t> json_length;
  if (size >= 2 && data[0] != '{') {
    json_length = static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8;
    body.remove_prefix(2);
  }
  try {
    const kiln::serve::InferRequest request = kiln::serve::parse_infer_request(body, json_length, model());
    std::vector<kiln::ir::Tensor> outputs;
    for (const kiln::serve::TensorSpec& spec : model().outputs) {
      kiln::ir::Shape shape = spec.shape;
      shape[0] = spec.dynamic[0] ? request.inputs[0].shape()[0] : shape[0];
      outputs.emplace_back(kiln::ir::TensorType{spec.dtype, shape});
    }
    (void)kiln::serve::encode_infer_response(model(), "1", request, outputs);
  } catch (const kiln::serve::RequestError&) {
  }
  return 0;
}
