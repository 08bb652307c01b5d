// `kiln inspect --html FILE`: the compile report as one self-contained page — the kernels as a
// picture (Graphviz's SVG, inlined), the kernel table, the memory plan as a timeline, and the
// fusion refusals with their reasons. No external resources: the page opens from a file, offline.
//
// The timeline is drawn here as SVG: one bar per arena value, from the kernel that writes it
// to the last kernel that reads it (x), at its arena offset with its size (y). Values that
// share bytes never share time, which the picture makes plain.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "codegen/cost_model.h"
#include "compiler/inspect_report.h"
#include "compiler/kernel_report.h"
#include "ir/diagnostic.h"

namespace kiln::compiler {
namespace {

std::string thousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

// Graphviz's dot, DOT on stdin, SVG out; the XML prolog is dropped so the SVG inlines.
std::string render_svg(const std::string& dot_text) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = fmt::format("kiln-report-{}", ::getpid());
  const std::filesystem::path in = dir / (stem + ".dot"), out = dir / (stem + ".svg");
  {
    std::ofstream file(in);
    file << dot_text;
  }
  const std::string command = fmt::format("dot -Tsvg '{}' -o '{}' 2>/dev/null", in.string(), out.string());
  const int status = std::system(command.c_str());
  std::filesystem::remove(in);
  std::ifstream svg_file(out);
  std::stringstream svg;
  svg << svg_file.rdbuf();
  std::filesystem::remove(out);
  if (status != 0 || svg.str().find("<svg") == std::string::npos)
    throw Error("--html", "Graphviz's dot did not draw the kernel graph (is it installed? "
                          "apt-get install graphviz)");
  const std::string text = svg.str();
  return text.substr(text.find("<svg"));
}

struct Lifetime {
  int buffer = 0;
  int first = 0;  // kernel index of the first write
  int last = 0;   // kernel index of the last read (or the write, when never read)
};

std::vector<Lifetime> arena_lifetimes(const codegen::Program& program) {
  std::vector<Lifetime> lifetimes;
  for (size_t id = 0; id < program.buffers.size(); ++id) {
    if (program.buffers[id].arena_offset < 0) continue;
    Lifetime life{static_cast<int>(id), -1, -1};
    for (size_t k = 0; k < program.kernels.size(); ++k) {
      const codegen::Kernel& kernel = program.kernels[k];
      if (std::find(kernel.args.begin(), kernel.args.end(), static_cast<int>(id)) == kernel.args.end()) continue;
      if (life.first < 0) life.first = static_cast<int>(k);
      life.last = static_cast<int>(k);
    }
    if (life.first >= 0) lifetimes.push_back(life);
  }
  return lifetimes;
}

std::string memory_timeline_svg(const codegen::Program& program) {
  const std::vector<Lifetime> lifetimes = arena_lifetimes(program);
  if (lifetimes.empty() || program.arena_bytes == 0)
    return "<p class=\"note\">No activation arena: plan-memory did not run, or nothing is planned.</p>";
  constexpr double kWidth = 900, kHeight = 320, kLeft = 70, kBottom = 30, kTop = 10;
  const double kernels = static_cast<double>(program.kernels.size());
  const double x_scale = (kWidth - kLeft - 10) / kernels;
  const double y_scale = (kHeight - kBottom - kTop) / static_cast<double>(program.arena_bytes);
  std::string svg = fmt::format(
      "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"memory plan timeline\">\n",
      kWidth, kHeight);
  // Axes: kernels along x, arena offset down y (offset 0 at the top).
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"axis\"/>\n", kLeft, kTop,
                     kHeight - kBottom);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"axis\"/>\n", kLeft,
                     kHeight - kBottom, kWidth - 10);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\">kernel →</text>\n", kWidth - 80, kHeight - 8);
  svg += fmt::format("<text x=\"4\" y=\"{}\" class=\"label\">offset 0</text>\n", kTop + 10);
  svg += fmt::format("<text x=\"4\" y=\"{}\" class=\"label\">{} B</text>\n", kHeight - kBottom,
                     thousands(program.arena_bytes));
  const size_t tick_every = std::max<size_t>(1, program.kernels.size() / 20);
  for (size_t k = 0; k < program.kernels.size(); k += tick_every)
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\">{}</text>\n",
                       kLeft + (static_cast<double>(k) + 0.5) * x_scale, kHeight - kBottom + 14, k);
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& life = lifetimes[i];
    const codegen::Buffer& buffer = program.buffers[static_cast<size_t>(life.buffer)];
    const double x = kLeft + life.first * x_scale;
    const double w = std::max(2.0, (life.last - life.first + 1) * x_scale - 1);
    const double y = kTop + static_cast<double>(buffer.arena_offset) * y_scale;
    const double h = std::max(1.0, static_cast<double>(buffer.bytes) * y_scale);
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" class=\"value c{}\">"
        "<title>{}: {} ({} B at offset {}), kernels {}..{}</title></rect>\n",
        x, y, w, h, i % 6, html_escape(buffer.name), buffer.type.to_string(), thousands(buffer.bytes),
        thousands(buffer.arena_offset), program.kernels[static_cast<size_t>(life.first)].name,
        program.kernels[static_cast<size_t>(life.last)].name);
  }
  return svg + "</svg>\n";
}

std::string kernel_rows(const Inspection& in) {
  std::string rows;
  for (size_t k = 0; k < in.program.kernels.size(); ++k) {
    const codegen::Kernel& kernel = in.program.kernels[k];
    std::string nodes;
    for (size_t i = 0; i < kernel.source_nodes.size(); ++i)
      nodes += fmt::format("{}{} <span class=\"op\">{}</span>", i ? ", " : "", html_escape(kernel.source_nodes[i]),
                           html_escape(i < kernel.source_ops.size() ? kernel.source_ops[i] : "?"));
    std::string shapes;
    for (size_t a = kernel.args.size() - static_cast<size_t>(kernel.num_outputs); a < kernel.args.size(); ++a)
      shapes += (shapes.empty() ? "" : ", ") + in.program.buffers[static_cast<size_t>(kernel.args[a])].type.to_string();
    const int64_t bytes = kernel.bytes_read + kernel.bytes_written;
    const KernelModel model = model_kernel(in, kernel);
    const double seconds = model.time.seconds;
    rows += fmt::format("<tr><td data-v=\"{}\">{}</td><td class=\"name\">{}</td><td>{}</td><td>{}</td>"
                        "<td>{} {}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>",
                        k, k, html_escape(kernel.name), nodes, html_escape(shapes), dim3_text(kernel.grid),
                        dim3_text(kernel.block), kernel.flops, thousands(kernel.flops), bytes,
                        thousands(bytes));
    for (const std::string& arch : in.archs) {
      const std::optional<KernelArchFigures> f = kernel_arch_figures(kernel, in.binary, arch);
      if (!f) {
        rows += "<td>?</td><td>?</td><td>?</td>";
        continue;
      }
      rows += fmt::format("<td data-v=\"{0}\">{0}</td><td data-v=\"{1}\" class=\"{2}\">{1}</td>"
                          "<td data-v=\"{3:.3f}\">{4:.0f}%</td>",
                          f->registers, f->spill_bytes, f->spill_bytes ? "bad" : "",
                          f->occupancy.fraction(), 100 * f->occupancy.fraction());
    }
    std::string implementation = kernel.library ? html_escape(kernel.library->routine)
                                 : kernel.tensor_cores ? html_escape(fmt::format("generated, {}", model.time.unit))
                                                       : std::string("generated");
    if (!model.two_four_weights.empty())
      implementation += html_escape(fmt::format("; 2:4 sparse weights {}{}", fmt::join(model.two_four_weights, ", "),
                                                model.sparse_seconds ? fmt::format(" ({:.1f} ns on sparse tensor cores)",
                                                                                   *model.sparse_seconds * 1e9)
                                                                     : std::string()));
    rows += fmt::format("<td data-v=\"{:.6e}\">{:.1f} ns</td><td>{}</td></tr>\n", seconds, seconds * 1e9,
                        implementation);
  }
  return rows;
}

std::string decisions_list(const std::vector<std::pair<std::string, std::string>>& decisions) {
  std::string items;
  int refusals = 0;
  for (const auto& [pass, message] : decisions) {
    if (message.rfind("not fusing", 0) != 0) continue;
    ++refusals;
    items += fmt::format("<li><span class=\"pass\">{}</span> {}</li>\n", html_escape(pass), html_escape(message));
  }
  if (refusals == 0) return "<p class=\"note\">No fusion was refused (or none was recorded).</p>";
  return fmt::format("<p>{} refusal(s), in the order the passes made them.</p>\n<ul class=\"refusals\">\n{}</ul>\n",
                     refusals, items);
}

constexpr const char* kStyle = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; vertical-align: top; }
td:nth-child(2), td:nth-child(3), td:nth-child(4) { text-align: left; }
th { background: #f3f3f3; cursor: pointer; user-select: none; }
th.sorted::after { content: " ▾"; }
.op { color: #777; } .bad { color: #b00; font-weight: bold; } .note { color: #666; }
.figures td:first-child { text-align: left; }
.graph svg { max-width: 100%; height: auto; }
.timeline .axis { stroke: #444; } .timeline .label, .timeline .tick { font-size: 10px; fill: #444; }
.timeline .value { stroke: #fff; stroke-width: 0.5; }
.c0 { fill: #4e79a7; } .c1 { fill: #f28e2b; } .c2 { fill: #59a14f; }
.c3 { fill: #e15759; } .c4 { fill: #76b7b2; } .c5 { fill: #b07aa1; }
.refusals { font-family: monospace; font-size: 12px; } .pass { color: #777; }
)css";

// Sorting the kernel table by a column: the one piece of script the page has.
constexpr const char* kScript = R"js(
document.querySelectorAll("table.kernels th").forEach((th, column) => {
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const key = (row) => {
      const cell = row.cells[column];
      const v = cell.dataset.v;
      return v === undefined ? cell.textContent : Number(v);
    };
    const rows = Array.from(body.rows).sort((a, b) => (key(a) > key(b)) - (key(a) < key(b)));
    rows.forEach((row) => body.appendChild(row));
    th.parentNode.querySelectorAll("th").forEach((h) => h.classList.remove("sorted"));
    th.classList.add("sorted");
  });
});
)js";

}  // namespace

std::string format_inspection_html(const Inspection& in,
                                   const std::vector<std::pair<std::string, std::string>>& decisions) {
  const codegen::Program& p = in.program;
  int64_t flops = 0, bytes = 0, unfused = 0;
  size_t nodes = 0;
  for (const codegen::Kernel& k : p.kernels) {
    flops += k.flops;
    bytes += k.bytes_read + k.bytes_written;
    unfused += k.unfused_bytes;
    nodes += k.source_nodes.size();
  }
  const int64_t arena = p.planned ? p.arena_bytes : p.naive_bytes;
  std::string arch_headers;
  for (const std::string& arch : in.archs)
    arch_headers += fmt::format("<th>{0} regs</th><th>{0} spill B</th><th>{0} occupancy</th>", arch);

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<title>kiln report: {}</title>\n<style>{}</style>\n</head>\n<body>\n", html_escape(p.graph_name), kStyle);
  html += fmt::format("<h1>kiln compile report: graph @{}</h1>\n", html_escape(p.graph_name));
  html += fmt::format("<p>pipeline: {}<br>archs: {}</p>\n",
                      in.passes.empty() ? "none (-O0)" : html_escape(fmt::format("{}", fmt::join(in.passes, ", "))),
                      html_escape(fmt::format("{}", fmt::join(in.archs, ", "))));
  html += "<table class=\"figures\">\n";
  html += fmt::format("<tr><td>kernels</td><td>{} (from {} nodes)</td></tr>\n", p.kernels.size(), nodes);
  html += fmt::format("<tr><td>FLOPs</td><td>{}</td></tr>\n", thousands(flops));
  html += fmt::format("<tr><td>modeled DRAM bytes</td><td>{} after fusion, {} before</td></tr>\n",
                      thousands(bytes), thousands(unfused));
  html += fmt::format("<tr><td>activation memory</td><td>{} B planned, {} B lower bound, {} B naive</td></tr>\n",
                      thousands(arena), thousands(p.lower_bound_bytes), thousands(p.naive_bytes));
  html += "</table>\n";

  html += "<h2>Kernels</h2>\n<div class=\"graph\">\n" + render_svg(format_kernel_graph_dot(p)) + "</div>\n";
  html += "<h2>Kernel table</h2>\n<p class=\"note\">Click a column to sort. Modeled time: kiln inspect's H100 cost model (each kernel "
          "on its unit, at its tiles', waves' and template's efficiency; docs/inspect.md), not a measurement.</p>\n";
  html += "<table class=\"kernels\">\n<thead><tr><th>#</th><th>kernel</th><th>source nodes</th>"
          "<th>result shapes</th><th>grid, block</th><th>FLOPs</th><th>bytes</th>" +
          arch_headers + "<th>modeled time</th><th>implementation</th></tr></thead>\n<tbody>\n";
  html += kernel_rows(in) + "</tbody>\n</table>\n";
  html += "<h2>Memory plan</h2>\n<p class=\"note\">Each bar is a value in the activation arena, from "
          "the kernel that writes it to the last that reads it, at its offset; hover for details.</p>\n";
  html += memory_timeline_svg(p);
  html += "<h2>Fusion refusals</h2>\n" + decisions_list(decisions);
  html += fmt::format("<script>{}</script>\n</body>\n</html>\n", kScript);
  return html;
}

}  // namespace kiln::compiler
