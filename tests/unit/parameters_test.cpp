// Parameter sources: checking initializers, inline data and safetensors keys, and loading them.
#include "compiler/parameters.h"

#include <gtest/gtest.h>

#include <cstring>

#include "compiler/safetensors.h"
#include "io_test_util.h"
#include "ir/initializer.h"

namespace kiln::compiler {
namespace {

using ir::DType;
using ir::Tensor;
using ir::TensorType;
using testing_util::error_of;
using testing_util::fresh_test_dir;
using testing_util::write_raw;

const ir::SourceLoc kJsonLoc{"model.json", "/parameters/0"};

Tensor counting_tensor(TensorType type) {
  Tensor tensor(type);
  for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, double(i) + 0.5);
  return tensor;
}

// The error that checking `graph` gives, as printed.
std::string check_error(ir::Graph& graph) {
  return error_of([&] { check_parameter_sources(graph); }).render();
}

TEST(Parameters, NormalizesAndMaterializesInitializers) {
  ir::Graph graph;
  const TensorType type{DType::F32, {8, 4}};
  ir::Value* w = graph.add_parameter("w", type, ir::InitializerSpec{"he_normal", {}}, kJsonLoc);
  check_parameter_sources(graph);
  const auto& spec = std::get<ir::InitializerSpec>(*w->source);
  EXPECT_EQ(spec.args, (ir::AttrMap{{"seed", int64_t{0}}}));  // defaults filled in
  EXPECT_EQ(w->data, nullptr);                                // checking reads no data

  load_parameter_data(graph);
  ASSERT_NE(w->data, nullptr);
  EXPECT_EQ(w->data->bytes(), ir::materialize_initializer(spec, type).bytes());
}

TEST(Parameters, LocatesInitializerErrorsAtTheArgument) {
  ir::Graph graph;
  graph.add_parameter("w", {DType::F32, {2}},
                      ir::InitializerSpec{"uniform", {{"seed", int64_t{-1}}}}, kJsonLoc);
  EXPECT_EQ(check_error(graph),
            "model.json: /parameters/0/init/seed: error: parameter 'w': argument 'seed' must be "
            "a non-negative int, got -1");

  ir::Graph typo;
  typo.add_parameter("w", {DType::F32, {2}}, ir::InitializerSpec{"he_norml", {}}, kJsonLoc);
  EXPECT_EQ(check_error(typo),
            "model.json: /parameters/0/init: error: parameter 'w': unknown initializer "
            "'he_norml'; did you mean 'he_normal'?");

  // Textual IR locations are line:column; the argument pointer does not apply.
  ir::Graph text;
  text.add_parameter("w", {DType::I32, {2}}, ir::InitializerSpec{"normal", {}},
                     ir::SourceLoc{"net.ir", "", 3, 5});
  EXPECT_EQ(check_error(text),
            "net.ir:3:5: error: parameter 'w': initializer 'normal' needs a float parameter, not "
            "i32[2]");
}

TEST(Parameters, ChecksAndLoadsInlineData) {
  ir::Graph graph;
  ir::Value* b = graph.add_parameter("b", {DType::I32, {3}}, ir::InlineData{{1, -2, 3}}, kJsonLoc);
  load_parameter_data(graph);
  ASSERT_NE(b->data, nullptr);
  EXPECT_EQ(b->data->to_doubles(), (std::vector<double>{1, -2, 3}));

  ir::Graph short_data;
  short_data.add_parameter("b", {DType::F32, {4}}, ir::InlineData{{1, 2, 3}}, kJsonLoc);
  EXPECT_EQ(check_error(short_data),
            "model.json: /parameters/0: error: parameter 'b': inline data has 3 values, but "
            "f32[4] needs 4");

  ir::Graph fraction;
  fraction.add_parameter("idx", {DType::I64, {2}}, ir::InlineData{{1, 0.5}}, kJsonLoc);
  EXPECT_EQ(check_error(fraction),
            "model.json: /parameters/0: error: parameter 'idx': inline value 1 (0.5) is not "
            "representable in i64[2]");
  ir::Graph not_bool;
  not_bool.add_parameter("mask", {DType::Bool, {1}}, ir::InlineData{{2}}, kJsonLoc);
  EXPECT_EQ(check_error(not_bool),
            "model.json: /parameters/0: error: parameter 'mask': inline value 0 (2.0) is not "
            "representable in bool[1]");
}

// A weights file with fc.weight f32[4,3], fc.bias f16[4] and a few more.
std::string make_weights(const std::filesystem::path& dir) {
  const std::string path = (dir / "w.safetensors").string();
  std::map<std::string, Tensor> tensors;
  tensors.emplace("fc.weight", counting_tensor({DType::F32, {4, 3}}));
  tensors.emplace("fc.bias", counting_tensor({DType::F16, {4}}));
  for (int i = 0; i < 6; ++i)
    tensors.emplace("layer" + std::to_string(i), counting_tensor({DType::F32, {1}}));
  write_safetensors(path, tensors);
  return path;
}

TEST(Parameters, LoadsFromSafetensors) {
  const std::string path = make_weights(fresh_test_dir());
  ir::Graph graph;
  ir::Value* w = graph.add_parameter("w", {DType::F32, {4, 3}},
                                     ir::ExternalData{path, "fc.weight"}, kJsonLoc);
  ir::Value* b = graph.add_parameter("b", {DType::F16, {4}}, ir::ExternalData{path, "fc.bias"},
                                     kJsonLoc);
  check_parameter_sources(graph);
  EXPECT_EQ(w->data, nullptr);
  load_parameter_data(graph);
  ASSERT_NE(w->data, nullptr);
  ASSERT_NE(b->data, nullptr);
  EXPECT_EQ(w->data->bytes(), counting_tensor({DType::F32, {4, 3}}).bytes());
  EXPECT_EQ(b->data->bytes(), counting_tensor({DType::F16, {4}}).bytes());

  // Parameters that already have data are left alone, even if their file has gone.
  const auto before = w->data;
  std::filesystem::remove(path);
  load_parameter_data(graph);
  EXPECT_EQ(w->data, before);
}

// F64 data loads into f64 exactly and into f32 and f16 rounded; an integer parameter does not
// take it.
TEST(Parameters, LoadsStoredF64IntoFloatsOnly) {
  const auto dir = fresh_test_dir();
  std::string data(16, '\0');
  const double values[] = {0.25, -1.0};
  std::memcpy(data.data(), values, sizeof(values));
  const std::string header = R"({"d": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})";
  std::string length(8, '\0');
  length[0] = static_cast<char>(header.size());
  write_raw(dir / "d.safetensors", length + header + data);
  const std::string path = (dir / "d.safetensors").string();

  ir::Graph graph;
  ir::Value* d = graph.add_parameter("d", {DType::F32, {2}}, ir::ExternalData{path, "d"}, kJsonLoc);
  load_parameter_data(graph);
  EXPECT_EQ(d->data->to_doubles(), (std::vector<double>{0.25, -1.0}));

  ir::Graph wide;
  ir::Value* w = wide.add_parameter("d", {DType::F64, {2}}, ir::ExternalData{path, "d"}, kJsonLoc);
  load_parameter_data(wide);
  EXPECT_EQ(w->data->type().to_string(), "f64[2]");
  EXPECT_EQ(w->data->to_doubles(), (std::vector<double>{0.25, -1.0}));

  ir::Graph half;
  ir::Value* h = half.add_parameter("d", {DType::F16, {2}}, ir::ExternalData{path, "d"}, kJsonLoc);
  load_parameter_data(half);
  EXPECT_EQ(h->data->type().to_string(), "f16[2]");

  ir::Graph ints;
  ints.add_parameter("d", {DType::I32, {2}}, ir::ExternalData{path, "d"}, kJsonLoc);
  EXPECT_EQ(check_error(ints),
            "model.json: /parameters/0: error: parameter 'd': dtype F64 in d.safetensors does "
            "not match the declared i32[2]");
}

TEST(Parameters, ReportsMismatchedTypes) {
  const std::string path = make_weights(fresh_test_dir());
  auto error_for = [&](TensorType type, const std::string& key) {
    ir::Graph graph;
    graph.add_parameter("fc.weight", type, ir::ExternalData{path, key}, kJsonLoc);
    return check_error(graph);
  };
  EXPECT_EQ(error_for({DType::F32, {4, 8}}, "fc.weight"),
            "model.json: /parameters/0: error: parameter 'fc.weight': shape [4,3] in "
            "w.safetensors does not match the declared f32[4,8]");
  EXPECT_EQ(error_for({DType::F16, {4, 3}}, "fc.weight"),
            "model.json: /parameters/0: error: parameter 'fc.weight': dtype F32 in "
            "w.safetensors does not match the declared f16[4,3]");
  EXPECT_EQ(error_for({DType::F64, {2}}, "fc.bias"),
            "model.json: /parameters/0: error: parameter 'fc.weight': stored F16[4] in "
            "w.safetensors does not match the declared f64[2]");
  // bf16 and f16 widen exactly to f32 (--weights-dtype): then only the shape can differ.
  EXPECT_EQ(error_for({DType::F32, {2}}, "fc.bias"),
            "model.json: /parameters/0: error: parameter 'fc.weight': shape [4] in "
            "w.safetensors does not match the declared f32[2]");
}

TEST(Parameters, SixteenBitWeightsWidenToF32) {
  const std::string path = make_weights(fresh_test_dir());
  ir::Graph graph;
  ir::Value* bias = graph.add_parameter("fc.bias", {DType::F32, {4}}, ir::ExternalData{path, "fc.bias"}, kJsonLoc);
  check_parameter_sources(graph);
  load_parameter_data(graph);
  ASSERT_NE(bias->data, nullptr);
  EXPECT_EQ(bias->data->type(), (TensorType{DType::F32, {4}}));
  const Tensor stored = counting_tensor({DType::F16, {4}});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(bias->data->get(i), stored.get(i)) << i;
}

TEST(Parameters, ReportsMissingKeyWithSuggestionAndSomeKeys) {
  const std::string path = make_weights(fresh_test_dir());
  ir::Graph graph;
  graph.add_parameter("w", {DType::F32, {4, 3}}, ir::ExternalData{path, "fc.weigth"}, kJsonLoc);
  EXPECT_EQ(check_error(graph),
            "model.json: /parameters/0: error: parameter 'w': no tensor 'fc.weigth' in "
            "w.safetensors; did you mean 'fc.weight'?\n"
            "note: w.safetensors holds 'fc.bias', 'fc.weight', 'layer0', 'layer1', 'layer2' and "
            "3 more");
}

TEST(Parameters, ReportsMissingAndCorruptFiles) {
  const auto dir = fresh_test_dir();
  const std::string missing = (dir / "gone.safetensors").string();
  ir::Graph graph;
  graph.add_parameter("w", {DType::F32, {2}}, ir::ExternalData{missing, "w"}, kJsonLoc);
  EXPECT_EQ(check_error(graph), "model.json: /parameters/0: error: parameter 'w': weights file '" +
                                    missing + "' not found");

  const std::string corrupt = (dir / "bad.safetensors").string();
  write_raw(corrupt, std::string("\x02\0\0\0\0\0\0\0[]", 10));
  ir::Graph bad;
  bad.add_parameter("w", {DType::F32, {2}}, ir::ExternalData{corrupt, "w"}, kJsonLoc);
  EXPECT_EQ(check_error(bad), "model.json: /parameters/0: error: parameter 'w': weights file '" +
                                  corrupt + "': header is not a JSON object");
}

}  // namespace
}  // namespace kiln::compiler
