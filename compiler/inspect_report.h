// What `kiln inspect` prints about a compiled graph: per kernel its source nodes, launch,
// modeled cost (codegen/cost_model.h) and ptxas figures; totals before and after fusion; the
// memory plan. As text for people, JSON for scripts (docs/inspect.md has the schema), and a
// Graphviz picture of the kernels.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cost_model.h"
#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::runtime {
struct Package;
struct PackageProgram;
}  // namespace kiln::runtime

namespace kiln::compiler {

// Everything a report reads: the kernel table (which names each kernel's source nodes and ops
// and carries the memory plan's figures) and what NVRTC made of it. No graph: the same report
// comes from a model just compiled and from a package (runtime/package/package.h).
struct Inspection {
  const codegen::Program& program;
  const runtime::CudaBinary& binary;
  std::vector<std::string> archs;
  std::vector<std::string> passes;  // the pipeline that ran, in order
  // The parameters' values where they are known (a package's weights; a model's weights read
  // from files), by name: a convolution or dense layer whose weights follow the 2:4 pattern of
  // sparse tensor cores is marked, with its time modeled on them.
  std::map<std::string, const ir::Tensor*> weights;
};

// The report of one program of a package: its tables, the package's archs and pipeline, and its
// weights.
Inspection package_inspection(const runtime::Package& package, const runtime::PackageProgram& program);

// What the cost model says of one kernel (codegen::model_kernel_time on the H100, its waves
// counted at the sm_90 occupancy ptxas gave, else the last arch's), and the 2:4-sparse weights
// of a conv2d or dense kernel with its time on sparse tensor cores: its math at twice its unit's
// rate, its bytes as they are (nullopt on FMA units, which have no sparse form).
struct KernelModel {
  codegen::KernelTime time;
  std::vector<std::string> two_four_weights;
  std::optional<double> sparse_seconds;
};
KernelModel model_kernel(const Inspection& inspection, const codegen::Kernel& kernel);

// Whether `weights` follow the 2:4 pattern of sparse tensor cores (kiln train
// --prune-pattern=2:4): viewed as [dim 0, the rest] (a conv's or dense layer's reduction
// dimension along the rows), rows a multiple of 4 long, at most 2 nonzeros in every 4 along a
// row, and some nonzero.
bool follows_two_four(const ir::Tensor& weights);

std::string format_inspection_text(const Inspection& inspection);
std::string format_inspection_json(const Inspection& inspection);

// A Graphviz digraph: one box per kernel listing its source nodes, an edge per tensor passed
// from kernel to kernel, graph inputs and outputs as ellipses (parameters are listed in the
// box of the kernel that reads them; see kernel_dot.cpp for why).
std::string format_kernel_graph_dot(const codegen::Program& program);

// `text` with & < > " as HTML entities (for Graphviz HTML labels and the HTML report).
std::string html_escape(std::string_view text);

// One self-contained HTML page (html_report.cpp): the kernel graph (drawn by Graphviz's dot,
// kiln::Error when it is missing), the kernel table, the memory plan as a timeline and the
// fusion refusals among `decisions` ((pass, message) as --debug-only prints them).
std::string format_inspection_html(const Inspection& inspection,
                                   const std::vector<std::pair<std::string, std::string>>& decisions);

}  // namespace kiln::compiler
