// The Open Inference Protocol (KServe v2, Triton's HTTP/REST API) as kiln's types: an inference
// request's JSON (and its binary tensor data extension) parsed into checked tensors, and the
// response, model metadata and errors written back. Pure functions of bytes: no sockets, no
// model; the fuzz harness tests/fuzz/fuzz_infer_request.cpp drives parse_infer_request.
//
// The request body is JSON, or, with the binary extension, JSON followed by raw tensor bytes:
// the header Inference-Header-Content-Length gives the JSON's length, and each input whose
// parameters hold "binary_data_size" takes that many bytes from what follows, in the order of
// the "inputs" array.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ir/tensor.h"

namespace kiln::serve {

// A request the server refuses: the HTTP status (400, 404, 413, 503) and the message sent back
// as {"error": message}.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// One input or output of a served model, as the protocol's metadata shows it.
struct TensorSpec {
  std::string name;
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;  // each dim at its bound
  std::vector<bool> dynamic;   // per dim: any size from 1 to the bound may be given ("-1" in metadata)
};

struct ModelSignature {
  std::string name;
  std::vector<TensorSpec> inputs, outputs;
};

// The protocol's datatype names: "FP32", "FP16", "BF16", "FP64", "INT8" ... "UINT64", "BOOL".
std::string_view protocol_dtype_name(ir::DType dtype);
std::optional<ir::DType> parse_protocol_dtype(std::string_view name);

struct RequestedOutput {
  std::string name;
  bool binary = false;
};

struct InferRequest {
  std::string id;                        // echoed in the response ("" when absent)
  std::vector<ir::Tensor> inputs;        // in the model's input order, shapes as given
  std::vector<RequestedOutput> outputs;  // in the model's output order; every output when the request names none
};

// Parses and checks a request against `model`: every input given once, by name, with the
// model's datatype and shape (a dynamic dim anywhere from 1 to its bound), data in range.
// `json_length`: the Inference-Header-Content-Length header, when there was one. Throws
// RequestError(400) naming the input and what is wrong.
InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length,
                                 const ModelSignature& model);

struct EncodedResponse {
  std::string body;
  std::optional<size_t> json_length;  // set when binary outputs follow the JSON
};

// The response to `request`: `outputs` in the model's output order.
EncodedResponse encode_infer_response(const ModelSignature& model, const std::string& version,
                                      const InferRequest& request, const std::vector<ir::Tensor>& outputs);

// GET /v2/models/{name}: name, versions, platform, inputs and outputs (dynamic dims as -1).
std::string model_metadata_json(const ModelSignature& model, const std::string& version);

// {"error": message}
std::string error_json(std::string_view message);

}  // namespace kiln::serve
