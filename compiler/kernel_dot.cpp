// `kiln inspect --dot FILE`: the fused kernels as a Graphviz digraph, drawn from the kernel
// table (the launches the runtime makes), not from the IR, so the picture shows what runs.
//
// Each kernel is a box (an HTML-like label): its name, then one row per source node with the
// node's op. Edges go from the kernel that writes a tensor to each kernel that reads it,
// labeled with the tensor's name and type. Graph inputs and outputs are ellipses.
//
// Parameters are not drawn as nodes: each is read by one kernel in an inference graph, so an
// ellipse per weight would double the shapes in the picture (resnet50: 100+) without showing
// any data flow. The kernel that reads them lists them in a last, grey row instead.
#include <fmt/format.h>

#include <set>

#include "compiler/inspect_report.h"

namespace kiln::compiler {

namespace {

// Rows of a kernel box past this many source nodes are summed up in one "… N more" row.
constexpr size_t kMaxNodeRows = 16;

// A double-quoted DOT string; "\n" in `text` stays a DOT line break.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string tensor_label(const codegen::Buffer& buffer) {
  return buffer.name + "\\n" + buffer.type.to_string();
}

std::string kernel_box(const codegen::Kernel& kernel, const std::vector<std::string>& params) {
  std::string rows = fmt::format("<tr><td align=\"left\"><b>{}</b></td></tr>", html_escape(kernel.name));
  if (kernel.library)
    rows += fmt::format("<tr><td align=\"left\"><i>{}</i></td></tr>", html_escape(kernel.library->routine));
  for (size_t i = 0; i < kernel.source_nodes.size() && i < kMaxNodeRows; ++i) {
    const std::string op = i < kernel.source_ops.size() ? kernel.source_ops[i] : "?";
    rows += fmt::format("<tr><td align=\"left\">{} <font color=\"#555555\">{}</font></td></tr>",
                        html_escape(kernel.source_nodes[i]), html_escape(op));
  }
  if (kernel.source_nodes.size() > kMaxNodeRows)
    rows += fmt::format("<tr><td align=\"left\">… {} more</td></tr>", kernel.source_nodes.size() - kMaxNodeRows);
  if (!params.empty())
    rows += fmt::format("<tr><td align=\"left\"><font point-size=\"8\" color=\"#777777\">{}</font></td></tr>",
                        html_escape(fmt::format("{}", fmt::join(params, ", "))));
  return "<<table border=\"1\" cellborder=\"0\" cellspacing=\"0\" cellpadding=\"3\">" + rows + "</table>>";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_kernel_graph_dot(const codegen::Program& program) {
  // The kernel that writes each buffer; -1 for inputs and parameters.
  std::vector<int> producer(program.buffers.size(), -1);
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const codegen::Kernel& kernel = program.kernels[k];
    for (size_t a = kernel.args.size() - kernel.num_outputs; a < kernel.args.size(); ++a)
      producer[kernel.args[a]] = static_cast<int>(k);
  }
  auto is_input = [&](int id) { return program.buffers[id].role == codegen::BufferRole::Input; };

  std::string out = fmt::format("// kiln inspect --dot: the kernels of graph @{}. Render with\n"
                                "//   dot -Tsvg FILE -o FILE.svg\n"
                                "digraph {} {{\n", program.graph_name, quoted(program.graph_name));
  out += "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
         "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#444444\"];\n";
  for (size_t id = 0; id < program.buffers.size(); ++id)
    if (program.buffers[id].role == codegen::BufferRole::Input)
      out += fmt::format("  in{} [shape=ellipse, label={}];\n", id, quoted(tensor_label(program.buffers[id])));

  std::string edges;
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const codegen::Kernel& kernel = program.kernels[k];
    std::vector<std::string> params;
    std::set<int> seen;  // a tensor read twice is one edge
    for (size_t a = 0; a + kernel.num_outputs < kernel.args.size(); ++a) {
      const int id = kernel.args[a];
      if (!seen.insert(id).second) continue;
      if (producer[id] >= 0) {
        edges += fmt::format("  k{} -> k{} [label={}];\n", producer[id], k,
                             quoted(tensor_label(program.buffers[id])));
      } else if (is_input(id)) {  // the input's ellipse already names it
        edges += fmt::format("  in{} -> k{};\n", id, k);
      } else {
        params.push_back(program.buffers[id].name);
      }
    }
    out += fmt::format("  k{} [shape=plain, label={}];\n", k, kernel_box(kernel, params));
  }
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const int id = program.outputs[i];
    out += fmt::format("  out{} [shape=ellipse, style=bold, label={}];\n", i,
                       quoted(program.output_names[i] + "\\n" + program.buffers[id].type.to_string()));
    if (producer[id] >= 0) edges += fmt::format("  k{} -> out{};\n", producer[id], i);
    else if (is_input(id)) edges += fmt::format("  in{} -> out{};\n", id, i);
  }
  return out + edges + "}\n";
}

}  // namespace kiln::compiler
