// ONNX conformance: every backend test in Debian's libonnx-testdata (node, pytorch-converted,
// pytorch-operator, simple, real), imported by kiln's ONNX importer and run on the reference
// evaluator in this one process, compared with the expected outputs as ONNX's own runner does
// (rtol 1e-3, atol 1e-7). Nothing is skipped: a test that cannot pass is listed with the reason
// (the importer's or evaluator's error message, shortened).
//
// A fixed sample of the node tests that pass on the evaluator also runs on the host backend:
// the imported graph emitted as CUDA C++ (one kernel per op, no passes), compiled by the host
// C++ compiler with the host prelude and run on the CPU, compared the same way. Every host
// program costs a compile of about a second, so the sample is kHostSample tests, every k-th
// passing node test in name order.
//
//   onnx_conformance DATA_DIR --write docs/onnx-support.md   regenerate the table
//   onnx_conformance DATA_DIR --check docs/onnx-support.md   fail when the pass count dropped
//                                                            below the doc's, or the doc is stale
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "codegen/emit.h"
#include "compiler/import/onnx/onnx_context.h"
#include "compiler/import/onnx/onnx_importer.h"
#include "compiler/import/onnx/onnx_tensor.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;
const char* const kCategories[] = {"node", "pytorch-converted", "pytorch-operator", "simple", "real"};
constexpr size_t kHostSample = 20;

struct Result {
  std::string category;
  std::string test;
  std::string op;  // the op a node test exercises ("" for model tests)
  bool pass = false;
  std::string why;
  fs::path dir;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Whether the tensor file holds a tensor with a zero dim: kiln has no empty tensors, and the
// importer takes an input the model declares with a zero dim as an empty constant, fed nothing.
bool holds_empty_tensor(const fs::path& path) {
  onnx::TensorProto proto;
  if (!proto.ParseFromString(read_file(path))) return false;
  return std::any_of(proto.dims().begin(), proto.dims().end(), [](int64_t d) { return d == 0; });
}

bool declares_zero_dim(const onnx::ValueInfoProto& value) {
  const auto& dims = value.type().tensor_type().shape().dim();
  return std::any_of(dims.begin(), dims.end(), [](const auto& d) { return d.has_dim_value() && d.dim_value() == 0; });
}

ir::Tensor read_tensor(const fs::path& path) {
  onnx::TensorProto proto;
  if (!proto.ParseFromString(read_file(path))) throw Error(path.filename().string(), "not a TensorProto");
  try {
    return compiler::onnx_import::tensor_from_proto(proto, path.parent_path().string());
  } catch (const compiler::onnx_import::ConvertError& e) {
    throw Error(path.filename().string(), e.message);
  }
}

// ONNX's generator writes bfloat16 data through numpy, which has no bfloat16: the files hold
// the same bit patterns as UINT16 tensors. Where the model declares BFLOAT16, read them as such.
ir::Tensor read_tensor_as(const fs::path& path, const onnx::ValueInfoProto& declared) {
  ir::Tensor tensor = read_tensor(path);
  if (declared.type().tensor_type().elem_type() == onnx::TensorProto::BFLOAT16 &&
      tensor.dtype() == ir::DType::U16)
    return ir::Tensor(ir::TensorType{ir::DType::BF16, tensor.shape()}, tensor.bytes());
  return tensor;
}

// One line, without the file location, at most ~110 characters; table-safe.
std::string shorten(std::string message) {
  if (size_t newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
  static const std::regex location(R"(^\S*model\.onnx: )");
  message = std::regex_replace(message, location, "");
  static const std::regex node(R"(node \d+ ('[^']*' )?\(([^,]+), opset \d+\): error: )");
  message = std::regex_replace(message, node, "$2: ");
  std::replace(message.begin(), message.end(), '|', '/');
  if (message.size() > 110) message = message.substr(0, 107) + "...";
  return message;
}

// Whether `got` matches `want` within rtol/atol (NaN matches NaN; bool and ints exactly).
std::string compare(const ir::Tensor& got, const ir::Tensor& want) {
  if (got.shape() != want.shape())
    return "output shape " + ir::shape_to_string(got.shape()) + ", expected " + ir::shape_to_string(want.shape());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!(std::abs(g - w) <= kAtol + kRtol * std::abs(w))) {
      std::ostringstream out;
      out << "wrong value at element " << i << ": " << g << ", expected " << w;
      return out.str();
    }
  }
  return "";
}

Result run_test(const std::string& category, const fs::path& dir) {
  Result result{category, dir.filename().string(), "", false, "", dir};
  const fs::path model_path = dir / "model.onnx";
  if (!fs::exists(model_path)) {
    result.why = "model not shipped: the package has only its download URL (data.json)";
    return result;
  }
  onnx::ModelProto model;
  const std::string bytes = read_file(model_path);
  if (!model.ParseFromString(bytes)) {
    result.why = "model.onnx does not parse";
    return result;
  }
  if (model.graph().node_size() == 1) result.op = model.graph().node(0).op_type();
  std::vector<std::string> inputs, outputs;
  std::vector<const onnx::ValueInfoProto*> input_infos, output_infos;
  {
    std::set<std::string> initializers;
    for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
    for (const auto& input : model.graph().input())
      if (!initializers.count(input.name())) {
        inputs.push_back(input.name());
        input_infos.push_back(&input);
      }
    for (const auto& output : model.graph().output()) {
      outputs.push_back(output.name());
      output_infos.push_back(&output);
    }
    // Sequence, map and optional values are out of kiln's scope: say so rather than misread
    // their data files as tensors.
    for (const auto* list : {&model.graph().input(), &model.graph().output()})
      for (const auto& value : *list)
        if (!initializers.count(value.name()) && value.type().value_case() != onnx::TypeProto::kTensorType) {
          const auto kind = value.type().value_case();
          result.why = "'" + value.name() + "' is " +
                       (kind == onnx::TypeProto::kSequenceType ? "a sequence"
                        : kind == onnx::TypeProto::kOptionalType ? "an optional"
                        : kind == onnx::TypeProto::kMapType ? "a map" : "not a tensor") +
                       " (sequences, maps and optionals are out of scope)";
          return result;
        }
  }
  std::vector<fs::path> data_sets;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && entry.path().filename().string().starts_with("test_data_set_"))
      data_sets.push_back(entry.path());
  std::sort(data_sets.begin(), data_sets.end());
  if (data_sets.empty()) {
    result.why = "no test data sets";
    return result;
  }
  try {
    for (const fs::path& data_set : data_sets) {
      std::map<std::string, ir::Tensor> feeds;
      compiler::ImportOptions options;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const fs::path file = data_set / ("input_" + std::to_string(i) + ".pb");
        if (!fs::exists(file)) continue;  // an optional input left out
        if (declares_zero_dim(*input_infos[i]) && holds_empty_tensor(file)) continue;
        ir::Tensor tensor = read_tensor_as(file, *input_infos[i]);
        options.input_shapes[inputs[i]] = tensor.shape();
        options.input_values[inputs[i]] = tensor;
        feeds.emplace(inputs[i], std::move(tensor));
      }
      ir::Graph graph = compiler::import_onnx(bytes, "model.onnx", dir.string(), options);
      const std::vector<ir::Tensor> got = eval::run_reference(graph, feeds);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const ir::Tensor want =
            read_tensor_as(data_set / ("output_" + std::to_string(i) + ".pb"), *output_infos[i]);
        const std::string mismatch = compare(got.at(i), want);
        if (!mismatch.empty()) {
          result.why = "output '" + outputs[i] + "': " + mismatch;
          return result;
        }
      }
    }
    result.pass = true;
  } catch (const Error& error) {
    result.why = shorten(error.what());
  } catch (const InternalError& error) {
    result.why = "internal error: " + shorten(error.what());
  } catch (const std::exception& error) {
    result.why = "exception: " + shorten(error.what());
  } catch (const ir::OpError& error) {
    result.why = "uncaught type error: " + shorten(error.message);
  }
  return result;
}

// The test's first data set on the host backend; `result` passed on the evaluator, so the
// model parses and its inputs are tensors.
Result run_on_host(const Result& reference) {
  Result result = reference;
  result.pass = false;
  const std::string bytes = read_file(reference.dir / "model.onnx");
  onnx::ModelProto model;
  model.ParseFromString(bytes);
  std::set<std::string> initializers;
  for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& input : model.graph().input())
    if (!initializers.count(input.name())) inputs.push_back(&input);
  const fs::path data_set = reference.dir / "test_data_set_0";
  try {
    std::map<std::string, ir::Tensor> feeds;
    compiler::ImportOptions options;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const fs::path file = data_set / ("input_" + std::to_string(i) + ".pb");
      if (!fs::exists(file) || (declares_zero_dim(*inputs[i]) && holds_empty_tensor(file))) continue;
      ir::Tensor tensor = read_tensor_as(file, *inputs[i]);
      options.input_shapes[inputs[i]->name()] = tensor.shape();
      options.input_values[inputs[i]->name()] = tensor;
      feeds.emplace(inputs[i]->name(), std::move(tensor));
    }
    const ir::Graph graph = compiler::import_onnx(bytes, "model.onnx", reference.dir.string(), options);
    const codegen::Program program = codegen::emit_program(graph);
    const runtime::host::HostModule module =
        runtime::host::HostModule::compile(program.source, reference.test, nullptr);
    std::vector<ir::Tensor> input_tensors, parameters;
    for (const ir::Value* input : graph.inputs) input_tensors.push_back(feeds.at(input->name));
    for (const ir::Value* param : graph.parameters) parameters.push_back(*param->data);
    runtime::host::HostOptions host_options;
    host_options.strict = true;
    const std::vector<ir::Tensor> got =
        runtime::host::run_program(program, module, input_tensors, parameters, host_options);
    for (int i = 0; i < model.graph().output_size(); ++i) {
      const ir::Tensor want =
          read_tensor_as(data_set / ("output_" + std::to_string(i) + ".pb"), model.graph().output(i));
      const std::string mismatch = compare(got.at(static_cast<size_t>(i)), want);
      if (!mismatch.empty()) {
        result.why = "output '" + model.graph().output(i).name() + "': " + mismatch;
        return result;
      }
    }
    result.pass = true;
    result.why = "";
  } catch (const Error& error) {
    result.why = shorten(error.what());
  } catch (const InternalError& error) {
    result.why = "internal error: " + shorten(error.what());
  } catch (const std::exception& error) {
    result.why = "exception: " + shorten(error.what());
  }
  return result;
}

// Every k-th node test that passes on the evaluator, kHostSample of them, in name order.
std::vector<Result> host_sample(const std::vector<Result>& results) {
  std::vector<const Result*> passing;
  for (const Result& r : results)
    if (r.category == "node" && r.pass) passing.push_back(&r);
  std::vector<Result> sample;
  if (passing.empty()) return sample;
  const size_t step = std::max<size_t>(1, passing.size() / kHostSample);
  for (size_t i = 0; i < passing.size() && sample.size() < kHostSample; i += step)
    sample.push_back(run_on_host(*passing[i]));
  return sample;
}

// A broad class of failure reasons, for the summary table.
std::string failure_class(const std::string& why) {
  const auto has = [&](const char* text) { return why.find(text) != std::string::npos; };
  if (has("model not shipped")) return "out of scope: model not shipped offline (real)";
  if (has("STRING") || has("String")) return "out of scope: strings";
  if (has("sequence") || has("an optional") || has("a map") || has("Sequence") || has("Optional"))
    return "out of scope: sequences, maps and optionals";
  if (has("ai.onnx.preview.training") || has("Gradient")) return "out of scope: training ops (ai.onnx.preview.training)";
  if (has("ai.onnx.ml")) return "out of scope: ai.onnx.ml";
  if (has("element type")) return "element type kiln lacks (int8, uint8, int16, uint16, uint32, uint64)";
  if (has("at least one element") || has("selects nothing") || has("got [0]"))
    return "empty tensors (kiln has none)";
  if (has("is not supported") && has(": op ")) return "op kiln does not import yet";
  if (has("3-D")) return "3-D convolution and pooling";
  if (has("must be known at import") || has("must be a constant") || has("constant scalar exponent"))
    return "needs a value at import that the model computes at run time";
  return "other (see the test list)";
}

std::string render(const std::vector<Result>& results, const std::vector<Result>& host) {
  std::ostringstream out;
  out << "# ONNX support\n\n"
      << "<!-- Generated by `cmake --build build --target onnx-support` (tests/onnx/conformance.cpp);\n"
      << "     do not edit. The ctest `onnx_conformance` fails when this file is stale. -->\n\n"
      << "The backend tests of Debian's libonnx-testdata (onnx 1.12), each imported by kiln's ONNX\n"
      << "importer (docs/import.md) and run on the reference evaluator, compared with the expected\n"
      << "outputs at rtol 1e-3, atol 1e-7 as ONNX's runner does. No test is skipped: each failure\n"
      << "gives the importer's or the evaluator's reason.\n\n"
      << "## Totals\n\n| category | tests | pass | fail | pass rate |\n|---|---:|---:|---:|---:|\n";
  int all = 0, all_pass = 0;
  for (const char* category : kCategories) {
    int total = 0, pass = 0;
    for (const Result& r : results)
      if (r.category == category) {
        ++total;
        pass += r.pass;
      }
    all += total;
    all_pass += pass;
    out << "| " << category << " | " << total << " | " << pass << " | " << total - pass << " | "
        << (total ? 100 * pass / total : 0) << " % |\n";
  }
  out << "| **all** | " << all << " | " << all_pass << " | " << all - all_pass << " | "
      << (all ? 100 * all_pass / all : 0) << " % |\n\n"
      << "Passing tests: " << all_pass << "\n\n";

  int host_pass = 0;
  for (const Result& r : host) host_pass += r.pass;
  out << "## Host backend sample\n\n"
      << "A fixed sample of the node tests that pass on the evaluator (every k-th in name order,\n"
      << host.size() << " tests), also emitted as CUDA C++ (one kernel per op, no passes),\n"
      << "compiled for the CPU with the host prelude and run there on the first data set: "
      << host_pass << " of " << host.size() << " pass.\n\n"
      << "| test | host backend | why |\n|---|---|---|\n";
  for (const Result& r : host)
    out << "| " << r.test << " | " << (r.pass ? "pass" : "fail") << " | " << r.why << " |\n";
  out << "\n";

  // Why tests fail, in broad classes: what is out of scope (strings, sequences, training ops)
  // is counted here, never hidden.
  std::map<std::string, int> classes;
  for (const Result& r : results)
    if (!r.pass) ++classes[failure_class(r.why)];
  out << "## Failures by reason\n\n| reason | tests |\n|---|---:|\n";
  for (const auto& [name, count] : classes) out << "| " << name << " | " << count << " |\n";
  out << "\n";

  // Node tests by op: a test's op is the one node of its model; an `_expanded` test (the op's
  // function body) counts for the op of the test it expands.
  std::map<std::string, std::string> op_of;
  for (const Result& r : results)
    if (r.category == "node" && !r.op.empty()) op_of[r.test] = r.op;
  std::map<std::string, std::pair<int, int>> by_op;
  std::map<std::string, std::string> first_why;
  for (const Result& r : results) {
    if (r.category != "node") continue;
    std::string op = r.op;
    if (r.test.ends_with("_expanded")) {
      auto it = op_of.find(r.test.substr(0, r.test.size() - 9));
      op = it != op_of.end() ? it->second + " (expanded)" : r.test;
    }
    if (op.empty()) op = r.test;
    auto& [pass, total] = by_op[op];
    ++total;
    pass += r.pass;
    if (!r.pass && !first_why.count(op)) first_why[op] = r.test + ": " + r.why;
  }
  out << "## Node tests by op\n\n| op | pass | tests | first failure |\n|---|---:|---:|---|\n";
  for (const auto& [op, counts] : by_op)
    out << "| " << op << " | " << counts.first << " | " << counts.second << " | "
        << (first_why.count(op) ? first_why[op] : "") << " |\n";

  for (const char* category : kCategories) {
    out << "\n## Every " << category << " test\n\n| test | result | why |\n|---|---|---|\n";
    for (const Result& r : results)
      if (r.category == category)
        out << "| " << r.test << " | " << (r.pass ? "pass" : "fail") << " | " << r.why << " |\n";
  }
  return out.str();
}

int doc_pass_count(const std::string& doc) {
  static const std::regex line(R"(Passing tests: (\d+))");
  std::smatch match;
  return std::regex_search(doc, match, line) ? std::stoi(match[1]) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool host_all = argc == 3 && std::string(argv[2]) == "--host-all";
  if (!host_all && (argc != 4 || (std::string(argv[2]) != "--write" && std::string(argv[2]) != "--check"))) {
    std::cerr << "usage: onnx_conformance DATA_DIR (--write|--check) DOC.md\n"
                 "       onnx_conformance DATA_DIR --host-all   (every passing node test on the host backend too:\n"
                 "                                               a compile each, minutes; prints, writes nothing)\n";
    return 2;
  }
  const fs::path root = argv[1];
  const std::string mode = argv[2];
  const fs::path doc = host_all ? fs::path() : fs::path(argv[3]);
  if (!fs::is_directory(root / "node")) {
    std::cerr << root.string() << ": no ONNX backend test data (install libonnx-testdata)\n";
    return 1;
  }
  std::vector<Result> results;
  for (const char* category : kCategories) {
    std::vector<fs::path> tests;
    if (fs::is_directory(root / category))
      for (const auto& entry : fs::directory_iterator(root / category))
        if (entry.is_directory()) tests.push_back(entry.path());
    std::sort(tests.begin(), tests.end());
    for (const fs::path& test : tests) results.push_back(run_test(category, test));
  }
  if (host_all) {
    int passed = 0, ran = 0;
    std::map<std::string, int> reasons;
    for (const Result& result : results) {
      if (!result.pass || result.category != "node") continue;
      const Result host = run_on_host(result);
      ++ran;
      if (host.pass) {
        ++passed;
        continue;
      }
      std::cout << host.test << ": " << host.why << "\n";
      // The reason without its per-test detail: up to the first ':' after the op's name.
      const std::string why = host.why;
      const size_t cut = why.find("codegen has no ");
      reasons[cut != std::string::npos ? why.substr(cut, why.find(' ', cut + 15) - cut) : "other"]++;
    }
    std::cout << "host backend: " << passed << " of " << ran << " node tests that pass on the evaluator\n";
    for (const auto& [why, count] : reasons) std::cout << "  " << count << " x " << why << "\n";
    return 0;
  }
  const std::string text = render(results, host_sample(results));
  const int passing = doc_pass_count(text);
  std::cout << "onnx conformance: " << passing << " of " << results.size() << " tests pass\n";
  if (mode == "--write") {
    std::ofstream(doc, std::ios::binary) << text;
    std::cout << "wrote " << doc.string() << "\n";
    return 0;
  }
  const std::string checked_in = read_file(doc);
  const int documented = doc_pass_count(checked_in);
  if (passing < documented) {
    std::cerr << "onnx conformance: " << passing << " tests pass, " << doc.string() << " says "
              << documented << ": a change broke ONNX support\n";
    return 1;
  }
  if (checked_in != text) {
    std::cerr << doc.string() << " is stale (" << documented << " passing there, " << passing
              << " now); regenerate it: cmake --build build --target onnx-support\n";
    return 1;
  }
  return 0;
}
