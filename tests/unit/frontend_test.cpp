// The JSON frontend: building graphs, topological sorting, and located errors.
#include <gtest/gtest.h>

#include "compiler/json_frontend.h"
#include "ir/diagnostic.h"
#include "ir/printer.h"

namespace kiln::compiler {
namespace {

ir::Graph parse(const std::string& text) { return parse_json_model(text, "m.json", "/tmp"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(JsonFrontend, BuildsAGraphInTopologicalOrder) {
  // Nodes listed out of order: the frontend sorts them.
  ir::Graph graph = parse(R"({"format": "kiln.model", "version": 1, "name": "t",
    "inputs": [{"name": "x", "shape": [2, 3]}],
    "nodes": [{"op": "relu", "name": "b", "inputs": ["a"]},
              {"op": "neg", "name": "a", "inputs": ["x"]}],
    "outputs": ["b"]})");
  ASSERT_EQ(graph.nodes().size(), 2u);
  EXPECT_EQ(graph.nodes()[0]->name, "a");
  EXPECT_EQ(graph.nodes()[1]->name, "b");
  EXPECT_EQ(graph.outputs[0]->type.to_string(), "f32[2,3]");
  EXPECT_EQ(graph.nodes()[1]->loc.render(), "m.json: /nodes/0");
}

TEST(JsonFrontend, DefaultsNodeNamesAndOutputs) {
  ir::Graph graph = parse(R"({"format": "kiln.model", "version": 1,
    "inputs": [{"name": "x", "dtype": "i32", "shape": [4]}],
    "nodes": [{"op": "abs", "inputs": ["x"]}],
    "outputs": ["abs_0"]})");
  EXPECT_EQ(graph.name, "model");
  EXPECT_EQ(graph.nodes()[0]->name, "abs_0");
  EXPECT_EQ(graph.outputs[0]->type.to_string(), "i32[4]");
}

TEST(JsonFrontend, LocatesErrors) {
  EXPECT_EQ(error_of(R"({"format": "kiln.model", "version": 1,
    "inputs": [{"name": "x", "shape": [2]}],
    "nodes": [{"op": "relu", "name": "r", "inputs": ["x"], "attrs": {"alpha": 1}}],
    "outputs": ["r"]})"),
            "m.json: /nodes/0/attrs/alpha: error: relu 'r': unknown attribute 'alpha'; relu takes "
            "no attributes");
  EXPECT_EQ(error_of(R"({"format": "kiln.model", "version": 1,
    "inputs": [{"name": "x", "shape": [2], "dtype": "c64"}], "outputs": ["x"]})"),
            "m.json: /inputs/0/dtype: error: unknown dtype 'c64'; expected one of f32, f16, bf16, "
            "f64, i8, i16, i32, i64, u8, u16, u32, u64, bool");
  EXPECT_EQ(error_of(R"({"format": "kiln.model", "version": 1,
    "inputs": [{"name": "x", "shape": [2]}],
    "nodes": [{"op": "relu", "name": "r", "inputs": ["x"]}, {"op": "neg", "name": "r", "inputs": ["x"], "outputs": ["n"]}],
    "outputs": ["r"]})"),
            "m.json: /nodes/1/name: error: node name 'r' is already used at /nodes/0");
  EXPECT_EQ(error_of("{\n  \"format\": 1,\n}"),
            "m.json:3:1: error: not valid JSON: syntax error while parsing object key - unexpected "
            "'}'; expected string literal");
}

TEST(JsonFrontend, ReportsSelfLoopsAsCycles) {
  EXPECT_EQ(error_of(R"({"format": "kiln.model", "version": 1,
    "inputs": [{"name": "x", "shape": [2]}],
    "nodes": [{"op": "add", "name": "acc", "inputs": ["x", "acc"]}],
    "outputs": ["acc"]})"),
            "m.json: /nodes/0: error: the graph has a cycle: add 'acc' -> add 'acc'");
}

}  // namespace
}  // namespace kiln::compiler
