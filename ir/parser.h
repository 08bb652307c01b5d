// Parser for kiln's textual IR (the form ir/printer.h prints).
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::ir {

// Parses one graph from `text`. `file` names the text in diagnostics ("net.ir:12:7: error: …");
// a relative path in a file("...", "key") parameter source resolves against `base_dir`.
// Every node is checked against the op registry as it is read (operand count, attributes,
// inferred result types against the written ones). Throws kiln::Error on the first problem.
Graph parse_graph(std::string_view text, const std::string& file, const std::string& base_dir = "");

}  // namespace kiln::ir
