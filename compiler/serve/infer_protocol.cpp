// The Open Inference Protocol's JSON, checked as strictly as kiln checks a model file: every
// refusal names the input (or field) and says what was expected.
#include "compiler/serve/infer_protocol.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "compiler/json_text.h"
#include "ir/dtype.h"

namespace kiln::serve {

using nlohmann::json;

namespace {

struct DTypeName {
  ir::DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {
    {ir::DType::F32, "FP32"},  {ir::DType::F16, "FP16"},  {ir::DType::BF16, "BF16"},
    {ir::DType::F64, "FP64"},  {ir::DType::I8, "INT8"},   {ir::DType::I16, "INT16"},
    {ir::DType::I32, "INT32"}, {ir::DType::I64, "INT64"}, {ir::DType::U8, "UINT8"},
    {ir::DType::U16, "UINT16"}, {ir::DType::U32, "UINT32"}, {ir::DType::U64, "UINT64"},
    {ir::DType::Bool, "BOOL"},
};

[[noreturn]] void refuse(const std::string& message) { throw RequestError(400, message); }

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

// "[batch<=8,784]"-like text of what an input accepts, for error messages.
std::string accepted_shape(const TensorSpec& spec) {
  std::vector<std::string> dims;
  for (size_t d = 0; d < spec.shape.size(); ++d)
    dims.push_back(spec.dynamic[d] ? fmt::format("1..{}", spec.shape[d]) : std::to_string(spec.shape[d]));
  return fmt::format("[{}]", fmt::join(dims, ","));
}

// JSON text for messages and responses; bytes that are not UTF-8 (in a model's names, or quoted
// from a malformed request) become U+FFFD instead of an exception.
std::string text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

const json* member(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// A JSON value as the element type: numbers for the numeric types (integral and in range for
// the integer ones), true/false (or 0/1) for BOOL.
double element(const json& value, ir::DType dtype, const std::string& where) {
  if (dtype == ir::DType::Bool) {
    if (value.is_boolean()) return value.get<bool>() ? 1 : 0;
    if (value.is_number_integer() && (value.get<int64_t>() == 0 || value.get<int64_t>() == 1))
      return static_cast<double>(value.get<int64_t>());
    refuse(fmt::format("{}: BOOL data must be true or false, got {}", where, text(value)));
  }
  if (!value.is_number())
    refuse(fmt::format("{}: {} data must be numbers, got {}", where, protocol_dtype_name(dtype), text(value)));
  const double number = value.get<double>();
  if (ir::is_integer(dtype) && (number != std::floor(number) || !ir::fits_dtype(number, dtype)))
    refuse(fmt::format("{}: {} is not a {} value", where, text(value), protocol_dtype_name(dtype)));
  if (ir::is_floating(dtype) && !ir::fits_dtype(number, dtype))
    refuse(fmt::format("{}: {} is out of the range of {}", where, text(value), protocol_dtype_name(dtype)));
  return number;
}

// The "data" array into `tensor`, row-major: flat (every item a value), or nested as the shape
// (at depth d an array of shape[d] items, values at the last dim).
void read_data(const json& data, size_t depth, bool nested, ir::Tensor& tensor, int64_t& next,
               const std::string& where) {
  const ir::Shape& shape = tensor.shape();
  if (nested && static_cast<int64_t>(data.size()) != shape[depth])
    refuse(fmt::format("{}: \"data\" nests arrays that do not follow the shape {}", where, shape_text(shape)));
  const bool leaves = !nested || depth + 1 == shape.size();
  for (const json& item : data) {
    if (!leaves) {
      if (!item.is_array())
        refuse(fmt::format("{}: \"data\" nests arrays that do not follow the shape {}", where, shape_text(shape)));
      read_data(item, depth + 1, true, tensor, next, where);
      continue;
    }
    if (item.is_array())
      refuse(fmt::format("{}: \"data\" nests arrays that do not follow the shape {}", where, shape_text(shape)));
    if (next >= tensor.num_elements())
      refuse(fmt::format("{}: \"data\" holds more than the {} elements of shape {}", where,
                         tensor.num_elements(), shape_text(shape)));
    tensor.set(next, element(item, tensor.dtype(), fmt::format("{}: element {}", where, next)));
    ++next;
  }
}

std::vector<int64_t> read_shape(const json& input, const TensorSpec& spec, const std::string& where) {
  const json* shape = member(input, "shape");
  if (!shape || !shape->is_array()) refuse(where + ": \"shape\" must be an array of dims");
  std::vector<int64_t> dims;
  for (const json& dim : *shape) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 1)
      refuse(fmt::format("{}: \"shape\" {} must hold integers >= 1", where, text(*shape)));
    dims.push_back(dim.get<int64_t>());
  }
  bool fits = dims.size() == spec.shape.size();
  for (size_t d = 0; fits && d < dims.size(); ++d)
    fits = spec.dynamic[d] ? dims[d] <= spec.shape[d] : dims[d] == spec.shape[d];
  if (!fits)
    refuse(fmt::format("{}: shape {} does not fit the model's {}", where, shape_text(dims), accepted_shape(spec)));
  return dims;
}

// One entry of "inputs": its tensor, its data from JSON or from the binary section at `binary`.
ir::Tensor read_input(const json& input, const TensorSpec& spec, std::string_view& binary) {
  const std::string where = "input '" + spec.name + "'";
  const json* datatype = member(input, "datatype");
  if (!datatype || !datatype->is_string()) refuse(where + ": \"datatype\" must be a string such as \"FP32\"");
  if (datatype->get<std::string>() != protocol_dtype_name(spec.dtype))
    refuse(fmt::format("{}: datatype {} does not match the model's {}", where, text(*datatype),
                       protocol_dtype_name(spec.dtype)));
  ir::Tensor tensor(ir::TensorType{spec.dtype, read_shape(input, spec, where)});

  const json* parameters = member(input, "parameters");
  if (parameters && !parameters->is_object()) refuse(where + ": \"parameters\" must be an object");
  const json* binary_size = parameters ? member(*parameters, "binary_data_size") : nullptr;
  const json* data = member(input, "data");
  if (binary_size) {
    if (data) refuse(where + ": has both \"data\" and binary_data_size; give one");
    if (!binary_size->is_number_unsigned())
      refuse(where + ": binary_data_size must be a non-negative integer");
    const uint64_t size = binary_size->get<uint64_t>();
    if (size != tensor.byte_size())
      refuse(fmt::format("{}: binary_data_size {} is not the {} bytes of {} {}", where, size,
                         tensor.byte_size(), protocol_dtype_name(spec.dtype), shape_text(tensor.shape())));
    if (size > binary.size())
      refuse(fmt::format("{}: binary_data_size {} runs past the end of the body ({} bytes left)", where,
                         size, binary.size()));
    if (size > 0) std::memcpy(tensor.data(), binary.data(), size);
    binary.remove_prefix(size);
    // BOOL is one byte per element, 0 or 1: any other byte would read as a number elsewhere.
    if (spec.dtype == ir::DType::Bool)
      for (size_t i = 0; i < size; ++i)
        if (const auto byte = static_cast<unsigned char>(tensor.data()[i]); byte > 1)
          refuse(fmt::format("{}: element {}: BOOL binary data must be bytes 0 or 1, got {}", where, i, byte));
    return tensor;
  }
  if (!data || !data->is_array()) refuse(where + ": \"data\" must be an array (or use binary_data_size)");
  int64_t count = 0;
  const bool nested = !data->empty() && (*data)[0].is_array() && !tensor.shape().empty();
  read_data(*data, 0, nested, tensor, count, where);
  if (count != tensor.num_elements())
    refuse(fmt::format("{}: \"data\" holds {} elements; shape {} needs {}", where, count,
                       shape_text(tensor.shape()), tensor.num_elements()));
  return tensor;
}

bool flag(const json* parameters, const char* key, bool otherwise, const std::string& where) {
  if (!parameters) return otherwise;
  const json* value = member(*parameters, key);
  if (!value) return otherwise;
  if (!value->is_boolean()) refuse(fmt::format("{}: \"{}\" must be true or false", where, key));
  return value->get<bool>();
}

// The tensor's elements as a JSON array, written directly: nlohmann holds every float as a
// double and would print an f32 with 17 digits; fmt prints the shortest text that reads back
// as the same f32. JSON has no NaN or infinity: they are written as null (binary_data keeps them).
std::string tensor_data(const ir::Tensor& tensor) {
  std::string out = "[";
  const int64_t count = tensor.num_elements();
  out.reserve(static_cast<size_t>(count) * 12 + 2);
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) out += ',';
    const double value = tensor.get(i);
    if (tensor.dtype() == ir::DType::Bool) out += value != 0 ? "true" : "false";
    else if (!std::isfinite(value)) out += "null";
    else if (ir::is_integer(tensor.dtype())) fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(value));
    else if (tensor.dtype() == ir::DType::F64) fmt::format_to(std::back_inserter(out), "{}", value);
    else fmt::format_to(std::back_inserter(out), "{}", static_cast<float>(value));
  }
  return out + "]";
}

json spec_json(const TensorSpec& spec) {
  json shape = json::array();
  for (size_t d = 0; d < spec.shape.size(); ++d) shape.push_back(spec.dynamic[d] ? -1 : spec.shape[d]);
  return {{"name", spec.name}, {"datatype", protocol_dtype_name(spec.dtype)}, {"shape", shape}};
}

}  // namespace

std::string_view protocol_dtype_name(ir::DType dtype) {
  for (const DTypeName& entry : kDTypeNames)
    if (entry.dtype == dtype) return entry.name;
  return "?";
}

std::optional<ir::DType> parse_protocol_dtype(std::string_view name) {
  for (const DTypeName& entry : kDTypeNames)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
}

InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length,
                                 const ModelSignature& model) {
  if (json_length && *json_length > body.size())
    refuse(fmt::format("Inference-Header-Content-Length {} is longer than the body ({} bytes)", *json_length,
                       body.size()));
  std::string_view binary = json_length ? body.substr(*json_length) : std::string_view{};
  const std::string_view header = json_length ? body.substr(0, *json_length) : body;
  // Depth-limited, numbers finite, errors at the byte (compiler/json_text.h).
  json request;
  try {
    request = compiler::parse_json_text(header, "request", compiler::JsonLocation::ByteOffset, "not valid JSON");
  } catch (const Error& error) {
    refuse(error.what());
  }
  if (!request.is_object()) refuse("the request must be a JSON object with \"inputs\"");

  InferRequest result;
  if (const json* id = member(request, "id")) {
    if (!id->is_string()) refuse("\"id\" must be a string");
    result.id = id->get<std::string>();
  }
  const json* parameters = member(request, "parameters");
  if (parameters && !parameters->is_object()) refuse("\"parameters\" must be an object");
  const bool binary_default = flag(parameters, "binary_data_output", false, "parameters");

  const json* inputs = member(request, "inputs");
  if (!inputs || !inputs->is_array()) refuse("\"inputs\" must be an array of tensors");
  std::vector<std::optional<ir::Tensor>> given(model.inputs.size());
  for (const json& input : *inputs) {
    if (!input.is_object()) refuse("each entry of \"inputs\" must be an object");
    const json* name = member(input, "name");
    if (!name || !name->is_string()) refuse("an entry of \"inputs\" has no \"name\" string");
    size_t index = 0;
    while (index < model.inputs.size() && model.inputs[index].name != name->get<std::string>()) ++index;
    if (index == model.inputs.size()) {
      std::vector<std::string> names;
      for (const TensorSpec& spec : model.inputs) names.push_back("'" + spec.name + "'");
      refuse(fmt::format("model '{}' has no input {}; its inputs: {}", model.name, text(*name),
                         fmt::join(names, ", ")));
    }
    if (given[index]) refuse("input '" + model.inputs[index].name + "' is given twice");
    given[index] = read_input(input, model.inputs[index], binary);
  }
  for (size_t i = 0; i < given.size(); ++i) {
    if (!given[i]) refuse("input '" + model.inputs[i].name + "' is missing");
    result.inputs.push_back(std::move(*given[i]));
  }
  if (!binary.empty())
    refuse(fmt::format("{} bytes of binary data follow the JSON that no input's binary_data_size claims",
                       binary.size()));

  const json* outputs = member(request, "outputs");
  if (outputs && !outputs->is_array()) refuse("\"outputs\" must be an array");
  if (!outputs || outputs->empty()) {
    for (const TensorSpec& spec : model.outputs) result.outputs.push_back({spec.name, binary_default});
    return result;
  }
  std::vector<std::optional<bool>> wanted(model.outputs.size());
  for (const json& output : *outputs) {
    const json* name = output.is_object() ? member(output, "name") : nullptr;
    if (!name || !name->is_string()) refuse("each entry of \"outputs\" must be an object with a \"name\" string");
    size_t index = 0;
    while (index < model.outputs.size() && model.outputs[index].name != name->get<std::string>()) ++index;
    if (index == model.outputs.size())
      refuse(fmt::format("model '{}' has no output {}", model.name, text(*name)));
    const std::string where = "output '" + model.outputs[index].name + "'";
    const json* output_parameters = member(output, "parameters");
    if (output_parameters && !output_parameters->is_object()) refuse(where + ": \"parameters\" must be an object");
    if (output_parameters && member(*output_parameters, "classification"))
      refuse(where + ": the classification extension is not supported; ask for the tensor");
    wanted[index] = flag(output_parameters, "binary_data", binary_default, where);
  }
  for (size_t i = 0; i < wanted.size(); ++i)
    if (wanted[i]) result.outputs.push_back({model.outputs[i].name, *wanted[i]});
  return result;
}

EncodedResponse encode_infer_response(const ModelSignature& model, const std::string& version,
                                      const InferRequest& request, const std::vector<ir::Tensor>& outputs) {
  json response = {{"model_name", model.name}, {"model_version", version}};
  if (!request.id.empty()) response["id"] = request.id;
  // Each output's metadata through nlohmann, its data spliced in before the closing brace.
  std::string list;
  std::string binary;
  for (const RequestedOutput& wanted : request.outputs) {
    size_t index = 0;
    while (model.outputs[index].name != wanted.name) ++index;
    const ir::Tensor& tensor = outputs.at(index);
    json entry = {{"name", wanted.name}, {"datatype", protocol_dtype_name(tensor.dtype())},
                  {"shape", tensor.shape()}};
    if (wanted.binary) {
      entry["parameters"] = {{"binary_data_size", tensor.byte_size()}};
      binary.append(reinterpret_cast<const char*>(tensor.data()), tensor.byte_size());
    }
    std::string entry_text = text(entry);
    if (!wanted.binary) entry_text.insert(entry_text.size() - 1, ",\"data\":" + tensor_data(tensor));
    list += (list.empty() ? "" : ",") + entry_text;
  }
  std::string body = text(response);
  body.insert(body.size() - 1, ",\"outputs\":[" + list + "]");
  EncodedResponse encoded{std::move(body), std::nullopt};
  bool any_binary = false;
  for (const RequestedOutput& wanted : request.outputs) any_binary |= wanted.binary;
  if (any_binary) {
    encoded.json_length = encoded.body.size();
    encoded.body += binary;
  }
  return encoded;
}

std::string model_metadata_json(const ModelSignature& model, const std::string& version) {
  json inputs = json::array(), outputs = json::array();
  for (const TensorSpec& spec : model.inputs) inputs.push_back(spec_json(spec));
  for (const TensorSpec& spec : model.outputs) outputs.push_back(spec_json(spec));
  return text(json{{"name", model.name}, {"versions", {version}}, {"platform", "kiln"},
                   {"inputs", inputs}, {"outputs", outputs}});
}

std::string error_json(std::string_view message) { return text(json{{"error", message}}); }

}  // namespace kiln::serve
