// Textual IR: lexer, printer and parser, including the round trip.
#include <gtest/gtest.h>

#include "ir/diagnostic.h"
#include "ir/lexer.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

constexpr const char* kSmallGraph = R"(graph @small(%x: f32[2,3])
    params(%w: f32[3] = dense<[1.0,2.0,3.0]>,
           %k: f32[4,3] = zeros())
    -> (f32[2,4]) {
  %y = mul(%x, %w) : f32[2,3] loc("scale")
  %z = dense(%y, %k) : f32[2,4] loc("fc")
  %a = gelu(%z) {approximate = "tanh"} : f32[2,4]
  return %a
}
)";

TEST(Lexer, TokenizesNamesNumbersAndPunctuation) {
  Lexer lexer(R"(%x %"a b" @g -1.5e3 42 -inf "s\"q" -> // comment
  { })");
  std::vector<Tok> kinds;
  std::vector<std::string> texts;
  for (Token t = lexer.next(); t.kind != Tok::End; t = lexer.next()) {
    kinds.push_back(t.kind);
    texts.push_back(t.text);
  }
  EXPECT_EQ(kinds, (std::vector<Tok>{Tok::ValueName, Tok::ValueName, Tok::GraphName, Tok::Float,
                                     Tok::Integer, Tok::Float, Tok::String, Tok::Arrow,
                                     Tok::LBrace, Tok::RBrace}));
  EXPECT_EQ(texts[1], "a b");
  EXPECT_EQ(texts[6], "s\"q");
}

TEST(Lexer, ReportsPositions) {
  Lexer lexer("graph\n  @g");
  lexer.next();
  Token t = lexer.next();
  EXPECT_EQ(t.line, 2);
  EXPECT_EQ(t.column, 3);
}

TEST(Parser, ParsesAndPrintsBack) {
  Graph graph = parse_graph(kSmallGraph, "small.ir");
  verify(graph);
  ASSERT_EQ(graph.nodes().size(), 3u);
  EXPECT_EQ(graph.nodes()[0]->name, "scale");
  EXPECT_EQ(graph.nodes()[2]->attrs.at("approximate"), Attribute(std::string("tanh")));
  EXPECT_EQ(graph.parameters.size(), 2u);
  EXPECT_EQ(print_graph(graph), kSmallGraph);
}

TEST(Parser, RoundTripIsAFixedPoint) {
  const std::string once = print_graph(parse_graph(kSmallGraph, "a.ir"));
  const std::string twice = print_graph(parse_graph(once, "b.ir"));
  EXPECT_EQ(once, twice);
}

TEST(Parser, ResolvesRelativeWeightPaths) {
  Graph graph = parse_graph(R"(graph @g(%x: f32[2]) params(%w: f32[2] = file("w.safetensors", "w"))
      -> (f32[2]) {
  %y = add(%x, %w) : f32[2]
  return %y
})", "g.ir", "/models/dir");
  const auto& source = std::get<ExternalData>(*graph.parameters[0]->source);
  EXPECT_EQ(source.path, "/models/dir/w.safetensors");
  EXPECT_EQ(source.key, "w");
}

TEST(Parser, ErrorsCarryLineAndColumn) {
  try {
    parse_graph("graph @g(%x: f32[2]) -> (f32[2]) {\n  %y = relu(%q) : f32[2]\n  return %y\n}", "e.ir");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().location, "e.ir:2:13");
    EXPECT_EQ(error.diagnostic().message, "use of undefined value '%q'");
  }
}

TEST(Printer, NumbersUnnamedValuesWithoutClashes) {
  Graph graph;
  graph.name = "g";
  Value* x = graph.add_input("0", TensorType{DType::F32, {2}});
  const OpDef* relu = OpRegistry::instance().find("relu");
  Node* node = graph.add_node(ir::OpId::Relu, "", {x}, {}, {{"", TensorType{DType::F32, {2}}}});
  node->def = relu;
  graph.outputs.push_back(node->results[0]);
  verify(graph);
  const std::string text = print_graph(graph);
  EXPECT_NE(text.find("%1 = relu(%0)"), std::string::npos) << text;
  EXPECT_EQ(print_graph(parse_graph(text, "t.ir")), text);
}

TEST(Printer, QuotesNamesThatAreNotPlain) {
  EXPECT_TRUE(is_plain_name("conv1.weight"));
  EXPECT_FALSE(is_plain_name("a/b"));
  EXPECT_FALSE(is_plain_name(""));
}

TEST(Verifier, RejectsUseBeforeDefinition) {
  Graph graph;
  graph.name = "g";
  Value* x = graph.add_input("x", TensorType{DType::F32, {2}});
  const OpDef* relu = OpRegistry::instance().find("relu");
  Node* first = graph.add_node(ir::OpId::Relu, "first", {x}, {}, {{"a", TensorType{DType::F32, {2}}}});
  Node* second = graph.add_node(ir::OpId::Relu, "second", {x}, {}, {{"b", TensorType{DType::F32, {2}}}});
  first->def = second->def = relu;
  first->inputs[0] = second->results[0];  // first now reads a value defined after it
  graph.outputs.push_back(first->results[0]);
  try {
    verify(graph);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message,
              "relu 'first': operand 0 ('b') is used before it is defined");
  }
}

TEST(Verifier, RejectsWrongResultTypesAndDuplicateNames) {
  Graph graph;
  graph.name = "g";
  Value* x = graph.add_input("x", TensorType{DType::F32, {2}});
  Node* node = graph.add_node(ir::OpId::Relu, "r", {x}, {}, {{"x", TensorType{DType::F32, {3}}}});
  node->def = OpRegistry::instance().find("relu");
  graph.outputs.push_back(node->results[0]);
  try {
    verify(graph);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message,
              "relu 'r': result type f32[3] does not match the inferred f32[2]");
  }
  node->results[0]->type = TensorType{DType::F32, {2}};
  try {
    verify(graph);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(error.diagnostic().message.find("name 'x' is used twice"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::ir
