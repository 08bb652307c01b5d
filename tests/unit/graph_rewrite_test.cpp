// The ir::Graph rewriting API the passes build on: users, replace_all_uses, erase_nodes,
// erase_parameters, insert_node_before, unique_name.
#include <gtest/gtest.h>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

constexpr const char* kGraph = R"(graph @g(%x: f32[2,3])
    params(%w: f32[3] = ones(), %unused: f32[3] = zeros())
    -> (f32[2,3], f32[2,3]) {
  %a = mul(%x, %w) : f32[2,3]
  %b = relu(%a) : f32[2,3]
  %s = add(%b, %b) : f32[2,3]
  %t = sub(%a, %b) : f32[2,3]
  return %s, %b
}
)";

Graph parse(const char* text = kGraph) {
  Graph graph = parse_graph(text, "g.ir");
  verify(graph);
  return graph;
}

std::vector<std::string> node_results(const Graph& graph) {
  std::vector<std::string> names;
  for (const auto& node : graph.nodes()) names.push_back(node->results[0]->name);
  return names;
}

TEST(GraphRewrite, UsersAreInGraphOrderAndListedOnce) {
  Graph graph = parse();
  const std::vector<Node*> users = graph.users(graph.find_value("b"));
  ASSERT_EQ(users.size(), 2u);  // add(%b, %b) once, then sub
  EXPECT_EQ(users[0]->op, OpId::Add);
  EXPECT_EQ(users[1]->op, OpId::Sub);
  EXPECT_EQ(graph.users(graph.find_value("w")).size(), 1u);
  EXPECT_TRUE(graph.users(graph.find_value("unused")).empty());
  EXPECT_TRUE(graph.users(graph.find_value("s")).empty());  // an output is no user
}

TEST(GraphRewrite, IsOutput) {
  Graph graph = parse();
  EXPECT_TRUE(graph.is_output(graph.find_value("s")));
  EXPECT_TRUE(graph.is_output(graph.find_value("b")));
  EXPECT_FALSE(graph.is_output(graph.find_value("a")));
  EXPECT_FALSE(graph.is_output(graph.find_value("x")));
}

TEST(GraphRewrite, ReplaceAllUsesRewritesOperandsAndOutputs) {
  Graph graph = parse();
  Value* a = graph.find_value("a");
  Value* b = graph.find_value("b");
  graph.replace_all_uses(b, a);
  EXPECT_TRUE(graph.users(b).empty());
  EXPECT_FALSE(graph.is_output(b));
  EXPECT_EQ(graph.outputs[1], a);
  EXPECT_EQ(graph.outputs[0], graph.find_value("s"));
  const Node* add = graph.find_value("s")->producer;
  EXPECT_EQ(add->inputs, (std::vector<Value*>{a, a}));  // both operand slots
  const Node* sub = graph.find_value("t")->producer;
  EXPECT_EQ(sub->inputs, (std::vector<Value*>{a, a}));
  verify(graph);
}

TEST(GraphRewrite, EraseNodesRemovesNodesAndTheirResults) {
  Graph graph = parse();
  const size_t values_before = graph.values().size();
  EXPECT_EQ(graph.erase_nodes([](const Node& node) { return node.op == ir::OpId::Sub; }), 1u);
  EXPECT_EQ(node_results(graph), (std::vector<std::string>{"a", "b", "s"}));
  EXPECT_EQ(graph.find_value("t"), nullptr);
  EXPECT_EQ(graph.values().size(), values_before - 1);
  EXPECT_EQ(graph.erase_nodes([](const Node&) { return false; }), 0u);
  verify(graph);
}

TEST(GraphRewrite, EraseNodesRefusesANodeThatIsStillRead) {
  Graph graph = parse();
  // %a is read by relu and sub, which stay.
  EXPECT_THROW(graph.erase_nodes([](const Node& node) { return node.op == ir::OpId::Mul; }),
               InternalError);
  // A node and all its readers may go together... unless a result is a graph output (%b).
  EXPECT_THROW(graph.erase_nodes([](const Node& node) { return node.op == ir::OpId::Relu || node.op == ir::OpId::Add ||
                                                               node.op == ir::OpId::Sub; }),
               InternalError);
  // The refusals left the graph as it was.
  EXPECT_EQ(node_results(graph), (std::vector<std::string>{"a", "b", "s", "t"}));
  verify(graph);
}

TEST(GraphRewrite, EraseNodesRefusesAnOutput) {
  Graph graph = parse();
  EXPECT_THROW(graph.erase_nodes([](const Node& node) { return node.op == ir::OpId::Add; }),
               InternalError);
  EXPECT_EQ(graph.nodes().size(), 4u);
}

TEST(GraphRewrite, EraseParameters) {
  Graph graph = parse();
  EXPECT_THROW(graph.erase_parameters([](const Value& param) { return param.name == "w"; }),
               InternalError);
  EXPECT_EQ(graph.parameters.size(), 2u);
  EXPECT_EQ(graph.erase_parameters([](const Value& param) { return param.name == "unused"; }), 1u);
  ASSERT_EQ(graph.parameters.size(), 1u);
  EXPECT_EQ(graph.parameters[0]->name, "w");
  EXPECT_EQ(graph.find_value("unused"), nullptr);
  verify(graph);
}

TEST(GraphRewrite, InsertNodeBeforeKeepsTopologicalOrder) {
  Graph graph = parse();
  Value* a = graph.find_value("a");
  const Node* relu = graph.find_value("b")->producer;
  // %n = neg(%a) before relu, then relu reads %n: still defined before use.
  Node* neg = graph.insert_node_before(relu, ir::OpId::Neg, "negate", {a}, {},
                                       {{graph.unique_name("n"), a->type}});
  neg->def = OpRegistry::instance().find("neg");  // insert_node_before leaves def to the caller
  EXPECT_EQ(node_results(graph), (std::vector<std::string>{"a", "n", "b", "s", "t"}));
  EXPECT_EQ(graph.nodes()[1].get(), neg);
  EXPECT_EQ(neg->results[0]->producer, neg);
  EXPECT_EQ(graph.find_value("n"), neg->results[0]);
  graph.nodes()[2]->inputs[0] = neg->results[0];
  verify(graph);
  EXPECT_NE(print_graph(graph).find("%n = neg(%a) : f32[2,3] loc(\"negate\")\n  %b = relu(%n)"),
            std::string::npos);

  // Before the first node, too.
  Node* first = graph.insert_node_before(graph.nodes()[0].get(), OpId::Exp, "", {graph.inputs[0]}, {},
                                         {{"e", a->type}});
  first->def = &OpRegistry::instance().get(OpId::Exp);
  EXPECT_EQ(graph.nodes()[0].get(), first);
  verify(graph);
}

TEST(GraphRewrite, InsertNodeBeforeANodeOfAnotherGraphIsAnInternalError) {
  Graph graph = parse();
  Graph other = parse();
  EXPECT_THROW(graph.insert_node_before(other.nodes()[0].get(), OpId::Neg, "", {graph.inputs[0]}, {},
                                        {{"n", graph.inputs[0]->type}}),
               InternalError);
}

TEST(GraphRewrite, UniqueName) {
  Graph graph = parse();
  EXPECT_EQ(graph.unique_name("fresh"), "fresh");
  EXPECT_EQ(graph.unique_name("w"), "w.1");
  EXPECT_EQ(graph.unique_name("a"), "a.1");
  const Node* relu = graph.find_value("b")->producer;
  graph.insert_node_before(relu, ir::OpId::Neg, "", {graph.find_value("a")}, {},
                           {{graph.unique_name("a"), graph.find_value("a")->type}});
  EXPECT_EQ(graph.unique_name("a"), "a.2");
}

}  // namespace
}  // namespace kiln::ir
