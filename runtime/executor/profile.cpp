#include "runtime/executor/profile.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kiln::runtime {

std::string chrome_trace_json(const codegen::Program& program, const std::vector<RunProfile>& runs) {
  using Json = nlohmann::ordered_json;
  auto dim3 = [](const codegen::Dim3& d) { return fmt::format("({},{},{})", d.x, d.y, d.z); };
  Json events = Json::array();
  const std::string backend = runs.empty() ? "" : runs.front().backend;
  const std::string device = runs.empty() ? "" : runs.front().device;
  // Names for the one process and thread every event is on.
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1},
                    {"args", {{"name", fmt::format("kiln {} backend: graph @{}", backend, program.graph_name)}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1},
                    {"args", {{"name", device.empty() ? backend : device}}}});
  double offset = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    double end = offset;
    for (const KernelTiming& t : runs[r].kernels) {
      const codegen::Kernel& kernel = program.kernels.at(static_cast<size_t>(t.kernel));
      Json nodes = Json::array();
      for (size_t i = 0; i < kernel.source_nodes.size(); ++i)
        nodes.push_back(fmt::format("{} ({})", kernel.source_nodes[i],
                                    i < kernel.source_ops.size() ? kernel.source_ops[i] : "?"));
      events.push_back({{"name", kernel.name},
                        {"cat", "kernel"},
                        {"ph", "X"},
                        {"ts", offset + t.start_us},
                        {"dur", t.duration_us},
                        {"pid", 1},
                        {"tid", 1},
                        {"args", {{"run", r + 1},
                                  {"source_nodes", std::move(nodes)},
                                  {"grid", dim3(kernel.grid)},
                                  {"block", dim3(kernel.block)},
                                  {"flops", kernel.flops},
                                  {"bytes", kernel.bytes_read + kernel.bytes_written}}}});
      end = std::max(end, offset + t.start_us + t.duration_us);
    }
    offset = end;
  }
  return Json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump(1) + "\n";
}

}  // namespace kiln::runtime
