// `kiln serve`'s protocol and metrics without a server: the Open Inference Protocol's request
// parsed and checked against a model (compiler/serve/infer_protocol.h), responses encoded, and
// the Prometheus page (compiler/serve/metrics.h). tests/serve/serve_test.py drives the server.
#include "compiler/serve/infer_protocol.h"
#include "compiler/serve/metrics.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::serve {
namespace {

using ir::DType;

const ModelSignature& model() {
  static const ModelSignature signature{
      "m",
      {{"x", DType::F32, {4, 3}, {true, false}}, {"flag", DType::Bool, {2}, {false}}, {"n", DType::U8, {1}, {false}}},
      {{"y", DType::F32, {4, 2}, {true, false}}, {"count", DType::I32, {1}, {false}}}};
  return signature;
}

// A request with x as given (JSON text of the entry), the other inputs valid.
std::string request_with_x(const std::string& x, const std::string& rest = "") {
  return R"({"inputs": [)" + x +
         R"(, {"name": "flag", "datatype": "BOOL", "shape": [2], "data": [true, 0]},
              {"name": "n", "datatype": "UINT8", "shape": [1], "data": [255]}])" + rest + "}";
}

std::string refusal(const std::string& body, std::optional<size_t> json_length = std::nullopt) {
  try {
    parse_infer_request(body, json_length, model());
  } catch (const RequestError& error) {
    EXPECT_EQ(error.status(), 400);
    return error.what();
  }
  return "(accepted)";
}

TEST(ServeProtocol, ParsesFlatAndNestedDataInTheModelsInputOrder) {
  const std::string nested =
      request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6.5]]})");
  const InferRequest request = parse_infer_request(nested, std::nullopt, model());
  ASSERT_EQ(request.inputs.size(), 3u);
  EXPECT_EQ(request.inputs[0].shape(), (ir::Shape{2, 3}));
  EXPECT_EQ(request.inputs[0].to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 6.5}));
  EXPECT_EQ(request.inputs[1].to_doubles(), (std::vector<double>{1, 0}));
  EXPECT_EQ(request.inputs[2].to_doubles(), (std::vector<double>{255}));
  const std::string flat =
      request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6.5]})");
  EXPECT_EQ(parse_infer_request(flat, std::nullopt, model()).inputs[0].to_doubles(), request.inputs[0].to_doubles());
  // No "outputs": every output, as JSON.
  ASSERT_EQ(request.outputs.size(), 2u);
  EXPECT_EQ(request.outputs[0].name, "y");
  EXPECT_FALSE(request.outputs[0].binary);
}

TEST(ServeProtocol, RefusesWhatDoesNotFitTheModelSayingWhere) {
  const std::string x = R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]})";
  EXPECT_EQ(refusal("[1]"), "the request must be a JSON object with \"inputs\"");
  EXPECT_NE(refusal("{\"inputs\": [").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(refusal(request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [5, 3], "data": []})")),
            "input 'x': shape [5,3] does not fit the model's [1..4,3]");
  EXPECT_EQ(refusal(request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [[1, 2], [3]]})")),
            "input 'x': \"data\" nests arrays that do not follow the shape [1,3]");
  EXPECT_EQ(refusal(request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, [2], 3]})")),
            "input 'x': \"data\" nests arrays that do not follow the shape [1,3]");
  EXPECT_EQ(refusal(request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3, 4]})")),
            "input 'x': \"data\" holds more than the 3 elements of shape [1,3]");
  EXPECT_EQ(refusal(request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 1e39]})")),
            "input 'x': element 2: 1e+39 is out of the range of FP32");
  EXPECT_EQ(refusal(request_with_x(x, R"(, "outputs": [{"name": "count", "parameters": {"classification": 2}}])")),
            "output 'count': the classification extension is not supported; ask for the tensor");
  EXPECT_EQ(refusal(R"({"inputs": [)" + x + "," + x + "]}"), "input 'x' is given twice");
  const std::string bad_u8 = R"({"inputs": [)" + x +
                             R"(, {"name": "flag", "datatype": "BOOL", "shape": [2], "data": [true, 2]}]})";
  EXPECT_EQ(refusal(bad_u8), "input 'flag': element 1: BOOL data must be true or false, got 2");
  const std::string u8 = request_with_x(x);
  std::string over = u8;
  over.replace(over.find("[255]"), 5, "[256]");
  EXPECT_EQ(refusal(over), "input 'n': element 0: 256 is not a UINT8 value");
}

TEST(ServeProtocol, BinaryTensorDataFollowsTheJson) {
  const std::string header = request_with_x(
      R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "parameters": {"binary_data_size": 12}})",
      R"(, "parameters": {"binary_data_output": true})");
  const float values[3] = {1.5f, -2, 3};
  std::string body = header + std::string(reinterpret_cast<const char*>(values), sizeof values);
  const InferRequest request = parse_infer_request(body, header.size(), model());
  EXPECT_EQ(request.inputs[0].to_doubles(), (std::vector<double>{1.5, -2, 3}));
  EXPECT_TRUE(request.outputs[0].binary);

  EXPECT_EQ(refusal(body + "x", header.size()),
            "1 bytes of binary data follow the JSON that no input's binary_data_size claims");
  EXPECT_EQ(refusal(body.substr(0, body.size() - 1), header.size()),
            "input 'x': binary_data_size 12 runs past the end of the body (11 bytes left)");
  EXPECT_EQ(refusal(body, body.size() + 1),
            "Inference-Header-Content-Length " + std::to_string(body.size() + 1) + " is longer than the body (" +
                std::to_string(body.size()) + " bytes)");

  const std::string bool_header =
      R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},
                     {"name": "flag", "datatype": "BOOL", "shape": [2], "parameters": {"binary_data_size": 2}},
                     {"name": "n", "datatype": "UINT8", "shape": [1], "data": [0]}]})";
  EXPECT_EQ(parse_infer_request(bool_header + std::string("\x01\x00", 2), bool_header.size(), model())
                .inputs[1].to_doubles(),
            (std::vector<double>{1, 0}));
  EXPECT_EQ(refusal(bool_header + std::string("\x01\x07", 2), bool_header.size()),
            "input 'flag': element 1: BOOL binary data must be bytes 0 or 1, got 7");

  // The response: the JSON, then each binary output's bytes in order.
  ir::Tensor y(ir::TensorType{DType::F32, {1, 2}});
  y.set(0, 0.25);
  y.set(1, -1);
  ir::Tensor count(ir::TensorType{DType::I32, {1}});
  const EncodedResponse response = encode_infer_response(model(), "1", request, {y, count});
  ASSERT_TRUE(response.json_length);
  EXPECT_EQ(response.body.substr(0, *response.json_length),
            R"({"model_name":"m","model_version":"1","outputs":[{"datatype":"FP32","name":"y","parameters":)"
            R"({"binary_data_size":8},"shape":[1,2]},{"datatype":"INT32","name":"count","parameters":)"
            R"({"binary_data_size":4},"shape":[1]}]})");
  EXPECT_EQ(response.body.size(), *response.json_length + 12);
  float first;
  std::memcpy(&first, response.body.data() + *response.json_length, 4);
  EXPECT_EQ(first, 0.25f);
}

TEST(ServeProtocol, JsonResponsesPrintEachF32Shortest) {
  const InferRequest request = parse_infer_request(
      request_with_x(R"({"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]})",
                     R"(, "id": "7", "outputs": [{"name": "y"}])"),
      std::nullopt, model());
  ir::Tensor y(ir::TensorType{DType::F32, {1, 2}});
  y.set(0, 0.1);
  y.set(1, std::numeric_limits<double>::quiet_NaN());
  const EncodedResponse response = encode_infer_response(model(), "1", request, {y, ir::Tensor()});
  EXPECT_FALSE(response.json_length);
  EXPECT_EQ(response.body, R"({"id":"7","model_name":"m","model_version":"1","outputs":[{"datatype":"FP32",)"
                           R"("name":"y","shape":[1,2],"data":[0.1,null]}]})");
}

TEST(ServeProtocol, MetadataShowsDynamicDimsAsMinusOne) {
  EXPECT_EQ(model_metadata_json(model(), "1"),
            R"({"inputs":[{"datatype":"FP32","name":"x","shape":[-1,3]},{"datatype":"BOOL","name":"flag","shape":[2]},)"
            R"({"datatype":"UINT8","name":"n","shape":[1]}],"name":"m","outputs":[{"datatype":"FP32","name":"y",)"
            R"("shape":[-1,2]},{"datatype":"INT32","name":"count","shape":[1]}],"platform":"kiln","versions":["1"]})");
  EXPECT_EQ(error_json("bad \"x\"\n"), R"({"error":"bad \"x\"\n"})");
}

TEST(ServeMetrics, PrometheusHistogramsAreCumulative) {
  Metrics metrics;
  metrics.request("m\"1", true, 0.003);
  metrics.request("m\"1", false, 20);
  metrics.run("m\"1", 3, 5, 0.0001);
  const std::string page = metrics.render();
  EXPECT_NE(page.find("kiln_inference_requests_total{model=\"m\\\"1\"} 2\n"), std::string::npos) << page;
  EXPECT_NE(page.find("kiln_inference_failures_total{model=\"m\\\"1\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_inference_samples_total{model=\"m\\\"1\"} 5\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_request_duration_seconds_bucket{model=\"m\\\"1\",le=\"0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_request_duration_seconds_bucket{model=\"m\\\"1\",le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_request_duration_seconds_bucket{model=\"m\\\"1\",le=\"10\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_request_duration_seconds_bucket{model=\"m\\\"1\",le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_batch_requests_bucket{model=\"m\\\"1\",le=\"2\"} 0\n"), std::string::npos);
  EXPECT_NE(page.find("kiln_batch_requests_bucket{model=\"m\\\"1\",le=\"4\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("# TYPE kiln_queue_duration_seconds histogram\n"), std::string::npos);
}

}  // namespace
}  // namespace kiln::serve
