#include "runtime/package/program_json.h"

#include <fmt/format.h>

#include <set>

#include "ir/diagnostic.h"
#include "ir/memory_plan.h"

namespace kiln::runtime {

// ---- JsonAt ---------------------------------------------------------------------------------

void JsonAt::fail(const std::string& message) const {
  throw Error(path_, fmt::format("manifest {}: {}", pointer_.empty() ? "/" : pointer_, message));
}

JsonAt JsonAt::operator[](const std::string& key) const {
  if (!json_.is_object()) fail("expected an object");
  auto it = json_.find(key);
  if (it == json_.end()) fail("missing '" + key + "'");
  return JsonAt(*it, pointer_ + "/" + key, path_);
}

JsonAt JsonAt::operator[](size_t index) const {
  if (!json_.is_array() || index >= json_.size()) fail(fmt::format("no element {}", index));
  return JsonAt(json_[index], fmt::format("{}/{}", pointer_, index), path_);
}

bool JsonAt::has(const std::string& key) const { return json_.is_object() && json_.contains(key); }

size_t JsonAt::size() const {
  if (!json_.is_array()) fail("expected a list");
  return json_.size();
}

std::string JsonAt::string() const {
  if (!json_.is_string()) fail("expected a string");
  return json_.get<std::string>();
}

int64_t JsonAt::integer() const {
  if (!json_.is_number_integer()) fail("expected an integer");
  return json_.get<int64_t>();
}

double JsonAt::number() const {
  if (!json_.is_number()) fail("expected a number");
  return json_.get<double>();
}

bool JsonAt::boolean() const {
  if (!json_.is_boolean()) fail("expected true or false");
  return json_.get<bool>();
}

std::vector<std::string> JsonAt::strings() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i].string());
  return out;
}

std::vector<int64_t> JsonAt::integers() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i].integer());
  return out;
}

namespace {

int to_int(const JsonAt& at) {
  const int64_t v = at.integer();
  if (v < INT32_MIN || v > INT32_MAX) at.fail("out of range");
  return static_cast<int>(v);
}

Json dim3_to_json(const codegen::Dim3& d) { return Json::array({d.x, d.y, d.z}); }

codegen::Dim3 dim3_from_json(const JsonAt& at) {
  const std::vector<int64_t> v = at.integers();
  if (v.size() != 3) at.fail("expected a list of 3 numbers");
  for (int64_t x : v)
    if (x < 1 || x > UINT32_MAX) at.fail("dimensions must be positive 32-bit numbers");
  return {static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]), static_cast<uint32_t>(v[2])};
}

Json type_to_json(const ir::TensorType& type) {
  return {{"dtype", std::string(ir::dtype_name(type.dtype))}, {"shape", type.shape}};
}

ir::TensorType type_from_json(const JsonAt& at) {
  const JsonAt dtype = at["dtype"];
  std::optional<ir::DType> parsed = ir::parse_dtype(dtype.string());
  if (!parsed) dtype.fail("unknown dtype '" + dtype.string() + "'");
  ir::TensorType type{*parsed, at["shape"].integers()};
  if (!ir::checked_num_elements(type.shape)) at["shape"].fail("not a valid shape");
  return type;
}

codegen::BufferRole role_from_json(const JsonAt& at) {
  for (codegen::BufferRole role : {codegen::BufferRole::Input, codegen::BufferRole::Parameter,
                                   codegen::BufferRole::Intermediate, codegen::BufferRole::Output})
    if (at.string() == codegen::buffer_role_name(role)) return role;
  at.fail("unknown buffer role '" + at.string() + "'");
}

// ---- library calls ---------------------------------------------------------------------------

codegen::LibraryActivation activation_from_json(const JsonAt& at) {
  for (auto a : {codegen::LibraryActivation::None, codegen::LibraryActivation::Relu,
                 codegen::LibraryActivation::GeluTanh})
    if (at.string() == codegen::library_activation_name(a)) return a;
  at.fail("unknown activation '" + at.string() + "'");
}

Json library_to_json(const codegen::LibraryCall& call) {
  Json json = {{"library", call.library},       {"routine", call.routine},
               {"descriptor", call.descriptor}, {"workspace_bytes", call.workspace_bytes},
               {"bias", call.bias},             {"residual", call.residual},
               {"activation", std::string(codegen::library_activation_name(call.activation))},
               {"x_arg", call.x_arg},           {"weight_arg", call.weight_arg},
               {"bias_arg", call.bias_arg},     {"residual_arg", call.residual_arg},
               {"out_arg", call.out_arg}};
  if (call.math == codegen::Precision::Tf32) json["tf32"] = true;  // as before bf16 and f16
  else if (call.math != codegen::Precision::F32) json["math"] = std::string(codegen::precision_name(call.math));
  if (call.dy_arg >= 0) json["dy_arg"] = call.dy_arg;
  if (call.dtype != ir::DType::F32) json["dtype"] = std::string(ir::dtype_name(call.dtype));
  if (const codegen::ConvCall* c = call.conv()) {
    json["conv"] = {{"n", c->n}, {"c", c->c}, {"h", c->h}, {"w", c->w}, {"k", c->k}, {"r", c->r},
                    {"s", c->s}, {"groups", c->groups}, {"pad_h", c->pad_h}, {"pad_w", c->pad_w},
                    {"stride_h", c->stride_h}, {"stride_w", c->stride_w},
                    {"dilation_h", c->dilation_h}, {"dilation_w", c->dilation_w},
                    {"p", c->p}, {"q", c->q}};
    if (c->direction != codegen::ConvDirection::Forward)
      json["conv"]["direction"] = std::string(codegen::conv_direction_name(c->direction));
    if (c->nhwc) json["conv"]["layout"] = "nhwc";
  } else if (const codegen::MatmulCall* m = call.matmul()) {
    json["matmul"] = {{"batch", m->batch}, {"m", m->m}, {"n", m->n}, {"k", m->k},
                      {"transpose_a", m->transpose_a}, {"transpose_b", m->transpose_b},
                      {"batch_stride_a", m->batch_stride_a}, {"batch_stride_b", m->batch_stride_b}};
  }
  return json;
}

codegen::LibraryCall library_from_json(const JsonAt& at) {
  codegen::LibraryCall call;
  call.library = at["library"].string();
  if (call.library != codegen::kCudnnLibrary && call.library != codegen::kCublasLtLibrary)
    at["library"].fail("unknown library '" + call.library + "'");
  call.routine = at["routine"].string();
  call.descriptor = at["descriptor"].string();
  call.workspace_bytes = at["workspace_bytes"].integer();
  call.bias = at["bias"].boolean();
  call.residual = at["residual"].boolean();
  call.activation = activation_from_json(at["activation"]);
  call.x_arg = to_int(at["x_arg"]);
  call.weight_arg = to_int(at["weight_arg"]);
  call.bias_arg = to_int(at["bias_arg"]);
  call.residual_arg = to_int(at["residual_arg"]);
  call.out_arg = to_int(at["out_arg"]);
  if (at.has("tf32") && at["tf32"].boolean()) call.math = codegen::Precision::Tf32;  // older packages
  if (at.has("math")) {  // absent: f32 math, or tf32 as above
    const std::optional<codegen::Precision> math = codegen::parse_precision(at["math"].string());
    if (!math) at["math"].fail("unknown math '" + at["math"].string() + "'; expected one of " + std::string(codegen::kPrecisionNames));
    call.math = *math;
  }
  if (at.has("dy_arg")) call.dy_arg = to_int(at["dy_arg"]);
  if (at.has("dtype")) {  // absent: f32 (and older packages)
    const std::optional<ir::DType> dtype = ir::parse_dtype(at["dtype"].string());
    if (!dtype || !codegen::library_takes(*dtype))
      at["dtype"].fail("library calls take f32, bf16 or f16 tensors, not '" + at["dtype"].string() + "'");
    call.dtype = *dtype;
  }
  if (at.has("conv")) {
    const JsonAt c = at["conv"];
    call.op = codegen::ConvCall{c["n"].integer(),        c["c"].integer(),        c["h"].integer(),
                                c["w"].integer(),        c["k"].integer(),        c["r"].integer(),
                                c["s"].integer(),        c["groups"].integer(),   c["pad_h"].integer(),
                                c["pad_w"].integer(),    c["stride_h"].integer(), c["stride_w"].integer(),
                                c["dilation_h"].integer(), c["dilation_w"].integer(),
                                c["p"].integer(),        c["q"].integer()};
    if (c.has("direction")) {  // absent: forward (older packages)
      const std::string direction = c["direction"].string();
      bool known = false;
      for (auto d : {codegen::ConvDirection::Forward, codegen::ConvDirection::BackwardData,
                     codegen::ConvDirection::BackwardFilter}) {
        if (direction != codegen::conv_direction_name(d)) continue;
        std::get<codegen::ConvCall>(call.op).direction = d;
        known = true;
      }
      if (!known) c["direction"].fail("unknown convolution direction '" + direction + "'");
    }
    if (c.has("layout")) {  // absent: NCHW (and older packages)
      const std::string layout = c["layout"].string();
      if (layout != "nhwc" && layout != "nchw") c["layout"].fail("unknown layout '" + layout + "'; expected nchw or nhwc");
      std::get<codegen::ConvCall>(call.op).nhwc = layout == "nhwc";
    }
  } else {
    const JsonAt m = at["matmul"];
    call.op = codegen::MatmulCall{m["batch"].integer(),  m["m"].integer(),
                                  m["n"].integer(),      m["k"].integer(),
                                  m["transpose_a"].boolean(), m["transpose_b"].boolean(),
                                  m["batch_stride_a"].integer(), m["batch_stride_b"].integer()};
  }
  return call;
}

// ---- kernels and buffers ---------------------------------------------------------------------

Json kernel_to_json(const codegen::Kernel& k) {
  Json json = {{"name", k.name},
               {"source_nodes", k.source_nodes},
               {"source_ops", k.source_ops},
               {"op_kind", k.op_kind},
               {"grid", dim3_to_json(k.grid)},
               {"block", dim3_to_json(k.block)},
               {"dynamic_shared_bytes", k.dynamic_shared_bytes},
               {"uses_barriers", k.uses_barriers},
               {"args", k.args},
               {"num_outputs", k.num_outputs},
               {"flops", k.flops},
               {"bytes_read", k.bytes_read},
               {"bytes_written", k.bytes_written},
               {"unfused_bytes", k.unfused_bytes}};
  if (k.tensor_cores) json["tensor_cores"] = true;
  if (k.tensor_cores && k.tensor_core_inputs != codegen::Precision::Tf32)
    json["tensor_core_inputs"] = std::string(codegen::precision_name(k.tensor_core_inputs));
  if (k.host_variant) json["host_variant"] = true;
  if (k.gemm.m > 0)
    json["gemm"] = {{"m", k.gemm.m}, {"n", k.gemm.n}, {"k", k.gemm.k}, {"batch", k.gemm.batch},
                    {"tile_m", k.gemm.tile_m}, {"tile_n", k.gemm.tile_n}, {"tile_k", k.gemm.tile_k},
                    {"async_copies", k.gemm.async_copies}};
  if (k.gemm.sparse) json["gemm"]["sparse"] = true;
  if (k.library) json["library"] = library_to_json(*k.library);
  if (!k.library_refusal.empty()) json["library_refusal"] = k.library_refusal;
  if (k.collective)
    json["collective"] = {{"kind", k.collective->kind == codegen::Collective::Mean ? "mean" : "broadcast"},
                          {"index", k.collective->index}};
  if (!k.entry.empty()) json["entry"] = k.entry;
  if (k.dynamic_symbol >= 0) json["dynamic_rows"] = {{"symbol", k.dynamic_symbol}, {"grid_axis", k.dynamic_grid_axis}};
  return json;
}

codegen::Kernel kernel_from_json(const JsonAt& at) {
  codegen::Kernel k;
  k.name = at["name"].string();
  if (at.has("entry")) k.entry = at["entry"].string();  // absent: its own function
  k.source_nodes = at["source_nodes"].strings();
  k.source_ops = at["source_ops"].strings();
  k.op_kind = at["op_kind"].string();
  k.grid = dim3_from_json(at["grid"]);
  k.block = dim3_from_json(at["block"]);
  const int64_t shared = at["dynamic_shared_bytes"].integer();
  if (shared < 0 || shared > UINT32_MAX) at["dynamic_shared_bytes"].fail("out of range");
  k.dynamic_shared_bytes = static_cast<uint32_t>(shared);
  k.uses_barriers = at["uses_barriers"].boolean();
  k.tensor_cores = at.has("tensor_cores") && at["tensor_cores"].boolean();  // absent: FMA
  if (at.has("tensor_core_inputs")) {  // absent: tf32 (the only format before bf16 and f16)
    const JsonAt inputs = at["tensor_core_inputs"];
    const std::optional<codegen::Precision> format = codegen::parse_precision(inputs.string());
    if (!format || *format == codegen::Precision::F32)
      inputs.fail("unknown tensor-core operand format '" + inputs.string() + "'; expected tf32, bf16 or f16");
    k.tensor_core_inputs = *format;
  }
  // Absent: a kernel with one body (or a package from before host variants).
  k.host_variant = at.has("host_variant") && at["host_variant"].boolean();
  if (at.has("gemm")) {  // absent: no generated GEMM, or a package from before the cost model
    const JsonAt g = at["gemm"];
    k.gemm = codegen::GemmGeometry{g["m"].integer(),      g["n"].integer(),
                                   g["k"].integer(),      g["batch"].integer(),
                                   to_int(g["tile_m"]),   to_int(g["tile_n"]),
                                   to_int(g["tile_k"]),   g["async_copies"].boolean(),
                                   g.has("sparse") && g["sparse"].boolean()};  // absent: dense
    if (k.gemm.m <= 0 || k.gemm.n <= 0 || k.gemm.k <= 0 || k.gemm.batch <= 0 || k.gemm.tile_m <= 0 ||
        k.gemm.tile_n <= 0 || k.gemm.tile_k <= 0)
      g.fail("a GEMM's sizes and tiles must be positive");
  }
  for (size_t i = 0; i < at["args"].size(); ++i) k.args.push_back(to_int(at["args"][i]));
  k.num_outputs = to_int(at["num_outputs"]);
  k.flops = at["flops"].integer();
  k.bytes_read = at["bytes_read"].integer();
  k.bytes_written = at["bytes_written"].integer();
  k.unfused_bytes = at["unfused_bytes"].integer();
  if (at.has("library")) k.library = library_from_json(at["library"]);
  if (at.has("library_refusal")) k.library_refusal = at["library_refusal"].string();
  if (at.has("collective")) {  // absent: not a collective
    const JsonAt c = at["collective"];
    const std::string kind = c["kind"].string();
    if (kind != "mean" && kind != "broadcast") c["kind"].fail("expected mean or broadcast");
    k.collective = codegen::Collective{
        kind == "mean" ? codegen::Collective::Mean : codegen::Collective::Broadcast,
        to_int(c["index"])};
    if (k.collective->index < 0) c["index"].fail("must be >= 0");
  }
  if (at.has("dynamic_rows")) {
    k.dynamic_symbol = to_int(at["dynamic_rows"]["symbol"]);
    k.dynamic_grid_axis = to_int(at["dynamic_rows"]["grid_axis"]);
  }
  return k;
}

// A dim map as a list with one entry per dim: null (static) or [symbol, outer, inner].
Json dims_to_json(const ir::DimMap& dims) {
  Json list = Json::array();
  for (const ir::DynamicDim& d : dims)
    list.push_back(d.is_dynamic() ? Json::array({d.symbol, d.outer, d.inner}) : Json());
  return list;
}

ir::DimMap dims_from_json(const JsonAt& at) {
  ir::DimMap dims;
  for (size_t i = 0; i < at.size(); ++i) {
    const JsonAt entry = at[i];
    if (entry.json().is_null()) {
      dims.push_back({});
      continue;
    }
    const std::vector<int64_t> triple = entry.integers();
    if (triple.size() != 3) entry.fail("expected null or [symbol, outer, inner]");
    dims.push_back({to_int(entry[0]), triple[1], triple[2]});
  }
  return dims;
}

// Dynamic dims (ir/dynamic_dims.h) are written only by programs that have them, so packages of
// static programs read the same as before.
void dynamic_dims_to_json(const codegen::Program& program, Json& json) {
  if (program.symbols.empty()) return;
  Json symbols = Json::array();
  for (const ir::DimSymbol& s : program.symbols) symbols.push_back({{"name", s.name}, {"bound", s.bound}});
  Json inputs = Json::array(), outputs = Json::array();
  for (const ir::DimMap& dims : program.input_dims) inputs.push_back(dims_to_json(dims));
  for (const ir::DimMap& dims : program.output_dims) outputs.push_back(dims_to_json(dims));
  json["dynamic_dims"] = {{"symbols", std::move(symbols)}, {"inputs", std::move(inputs)},
                          {"outputs", std::move(outputs)}};
}

void dynamic_dims_from_json(const JsonAt& at, codegen::Program& program) {
  if (!at.has("dynamic_dims")) return;
  const JsonAt dynamic = at["dynamic_dims"];
  const JsonAt symbols = dynamic["symbols"];
  for (size_t i = 0; i < symbols.size(); ++i)
    program.symbols.push_back({symbols[i]["name"].string(), symbols[i]["bound"].integer()});
  for (size_t i = 0; i < dynamic["inputs"].size(); ++i)
    program.input_dims.push_back(dims_from_json(dynamic["inputs"][i]));
  for (size_t i = 0; i < dynamic["outputs"].size(); ++i)
    program.output_dims.push_back(dims_from_json(dynamic["outputs"][i]));
}

}  // namespace

Json program_to_json(const codegen::Program& program) {
  Json buffers = Json::array();
  for (const codegen::Buffer& b : program.buffers)
    buffers.push_back({{"name", b.name}, {"type", type_to_json(b.type)},
                       {"role", std::string(codegen::buffer_role_name(b.role))},
                       {"index", b.index}, {"bytes", b.bytes}, {"arena_offset", b.arena_offset}});
  Json kernels = Json::array();
  for (const codegen::Kernel& k : program.kernels) kernels.push_back(kernel_to_json(k));
  Json state = Json::array();
  for (const auto& update : program.state_updates)
    state.push_back({{"output", update.output}, {"parameter", update.parameter}});
  Json json = {{"graph_name", program.graph_name},
          {"precision", std::string(codegen::precision_name(program.precision))},
          {"buffers", std::move(buffers)},
          {"kernels", std::move(kernels)},
          {"outputs", program.outputs},
          {"output_names", program.output_names},
          {"state_updates", std::move(state)},
          {"memory_plan", {{"planned", program.planned},
                           {"arena_bytes", program.arena_bytes},
                           {"naive_bytes", program.naive_bytes},
                           {"lower_bound_bytes", program.lower_bound_bytes}}}};
  dynamic_dims_to_json(program, json);
  return json;
}

codegen::Program program_from_json(const JsonAt& at) {
  codegen::Program program;
  program.graph_name = at["graph_name"].string();
  if (at.has("precision")) {  // absent: f32 (packages before --precision)
    const std::optional<codegen::Precision> precision = codegen::parse_precision(at["precision"].string());
    if (!precision) at["precision"].fail("unknown precision '" + at["precision"].string() + "'; expected one of " + std::string(codegen::kPrecisionNames));
    program.precision = *precision;
  }
  const JsonAt buffers = at["buffers"];
  for (size_t i = 0; i < buffers.size(); ++i) {
    const JsonAt b = buffers[i];
    program.buffers.push_back(codegen::Buffer{b["name"].string(), type_from_json(b["type"]),
                                              role_from_json(b["role"]), to_int(b["index"]),
                                              b["bytes"].integer(), b["arena_offset"].integer()});
  }
  const JsonAt kernels = at["kernels"];
  for (size_t i = 0; i < kernels.size(); ++i) program.kernels.push_back(kernel_from_json(kernels[i]));
  for (size_t i = 0; i < at["outputs"].size(); ++i) program.outputs.push_back(to_int(at["outputs"][i]));
  program.output_names = at["output_names"].strings();
  const JsonAt state = at["state_updates"];
  for (size_t i = 0; i < state.size(); ++i)
    program.state_updates.push_back({to_int(state[i]["output"]), to_int(state[i]["parameter"])});
  const JsonAt plan = at["memory_plan"];
  program.planned = plan["planned"].boolean();
  program.arena_bytes = plan["arena_bytes"].integer();
  program.naive_bytes = plan["naive_bytes"].integer();
  program.lower_bound_bytes = plan["lower_bound_bytes"].integer();
  dynamic_dims_from_json(at, program);
  return program;
}

Json resources_to_json(const std::vector<KernelResources>& resources) {
  Json list = Json::array();
  for (const KernelResources& r : resources)
    list.push_back({{"kernel", r.kernel}, {"arch", r.arch}, {"registers", r.registers},
                    {"spill_store_bytes", r.spill_store_bytes}, {"spill_load_bytes", r.spill_load_bytes},
                    {"static_shared_bytes", r.static_shared_bytes},
                    {"stack_frame_bytes", r.stack_frame_bytes}, {"constant_bytes", r.constant_bytes},
                    {"barriers", r.barriers}});
  return list;
}

std::vector<KernelResources> resources_from_json(const JsonAt& at) {
  std::vector<KernelResources> resources;
  for (size_t i = 0; i < at.size(); ++i) {
    const JsonAt r = at[i];
    resources.push_back({r["kernel"].string(), r["arch"].string(), to_int(r["registers"]),
                         to_int(r["spill_store_bytes"]), to_int(r["spill_load_bytes"]),
                         to_int(r["static_shared_bytes"]), to_int(r["stack_frame_bytes"]),
                         to_int(r["constant_bytes"]), to_int(r["barriers"])});
  }
  return resources;
}

namespace {

// Symbols have names and bounds >= 1; each dim map has its buffer's rank, names a symbol and
// has outer × bound × inner as the buffer's extent there.
template <typename Fail>
void validate_dynamic_dims(const codegen::Program& program, const Fail& fail) {
  for (const ir::DimSymbol& s : program.symbols)
    if (s.name.empty() || s.bound < 1) fail(fmt::format("dynamic dim '{}' has bound {}", s.name, s.bound));
  const std::vector<int> inputs = program.buffer_ids(codegen::BufferRole::Input);
  if (program.symbols.empty() ? !program.input_dims.empty() || !program.output_dims.empty()
                              : program.input_dims.size() != inputs.size() ||
                                    program.output_dims.size() != program.outputs.size())
    fail("the dynamic dims do not list every input and output");
  const auto check = [&](const ir::DimMap& dims, int id) {
    if (dims.empty()) return;
    if (id < 0 || id >= static_cast<int>(program.buffers.size())) return;  // check_id says so
    const codegen::Buffer& b = program.buffers[static_cast<size_t>(id)];
    if (static_cast<int>(dims.size()) != b.type.rank())
      fail(fmt::format("buffer '{}' has {} dynamic-dim entries for rank {}", b.name, dims.size(), b.type.rank()));
    for (size_t d = 0; d < dims.size(); ++d) {
      if (!dims[d].is_dynamic()) continue;
      const int64_t extent = b.type.shape[d];
      if (dims[d].symbol >= static_cast<int>(program.symbols.size()) || dims[d].outer < 1 ||
          dims[d].inner < 1 || extent % dims[d].outer != 0 || extent / dims[d].outer % dims[d].inner != 0 ||
          extent / dims[d].outer / dims[d].inner != program.symbols[static_cast<size_t>(dims[d].symbol)].bound)
        fail(fmt::format("buffer '{}': dim {} does not match its dynamic dim", b.name, d));
    }
  };
  for (size_t i = 0; i < program.input_dims.size() && i < inputs.size(); ++i) check(program.input_dims[i], inputs[i]);
  for (size_t i = 0; i < program.output_dims.size() && i < program.outputs.size(); ++i)
    check(program.output_dims[i], program.outputs[i]);
}

}  // namespace

void validate_program(const codegen::Program& program, const std::string& path,
                      const std::string& what) {
  auto fail = [&](const std::string& message) {
    throw Error(path, fmt::format("{} program '{}': {}", what, program.graph_name, message));
  };
  const int num_buffers = static_cast<int>(program.buffers.size());
  auto check_id = [&](int id, const std::string& where) {
    if (id < 0 || id >= num_buffers)
      fail(fmt::format("{} names buffer {}, and there are {}", where, id, num_buffers));
  };
  for (const codegen::Buffer& b : program.buffers) {
    const int64_t bytes = ir::num_elements(b.type.shape) * static_cast<int64_t>(ir::dtype_size(b.type.dtype));
    if (b.bytes != bytes)
      fail(fmt::format("buffer '{}' of type {} has {} bytes, not {}", b.name, b.type.to_string(), b.bytes, bytes));
    if (b.arena_offset >= 0 &&
        (b.arena_offset % ir::kArenaAlignment != 0 || b.arena_offset + b.bytes > program.arena_bytes))
      fail(fmt::format("buffer '{}' at arena offset {} does not fit the {}-byte arena", b.name,
                       b.arena_offset, program.arena_bytes));
  }
  for (codegen::BufferRole role : {codegen::BufferRole::Input, codegen::BufferRole::Parameter}) {
    std::set<int> indices;
    for (const codegen::Buffer& b : program.buffers)
      if (b.role == role && (b.index < 0 || !indices.insert(b.index).second))
        fail(fmt::format("{} '{}' has index {}, missing or repeated", codegen::buffer_role_name(role),
                         b.name, b.index));
    if (!indices.empty() && *indices.rbegin() != static_cast<int>(indices.size()) - 1)
      fail(fmt::format("the {} indices have gaps", codegen::buffer_role_name(role)));
  }
  std::set<std::string> functions;  // the entries defined so far: kernels that launch their own
  for (const codegen::Kernel& k : program.kernels) {
    if (k.function() == k.name) functions.insert(k.name);
    else if (!functions.count(k.function()))
      fail(fmt::format("kernel '{}' launches function '{}', which no earlier kernel defines", k.name, k.function()));
    for (int id : k.args) check_id(id, "kernel '" + k.name + "'");
    if (k.num_outputs < 1 || k.num_outputs > static_cast<int>(k.args.size()))
      fail(fmt::format("kernel '{}' writes {} of its {} arguments", k.name, k.num_outputs, k.args.size()));
    if (k.block.count() > 1024) fail(fmt::format("kernel '{}' has a block of more than 1024 threads", k.name));
    if (k.source_ops.size() != k.source_nodes.size())
      fail(fmt::format("kernel '{}' lists {} source nodes and {} ops", k.name, k.source_nodes.size(),
                       k.source_ops.size()));
    if (k.dynamic_symbol >= 0 || k.dynamic_symbol < -1) {
      if (k.dynamic_symbol >= static_cast<int>(program.symbols.size()) || k.dynamic_symbol < 0)
        fail(fmt::format("kernel '{}' computes the real rows of symbol {}, which the program does not have",
                         k.name, k.dynamic_symbol));
      if (k.dynamic_grid_axis < 0 || k.dynamic_grid_axis > 2)
        fail(fmt::format("kernel '{}': dynamic rows on grid axis {} (0, 1 or 2)", k.name, k.dynamic_grid_axis));
    }
    if (k.library) {
      // The tensors the call reads and writes: a backward convolution reads dy and one of x
      // and w; everything else x and w (a and b).
      const codegen::ConvCall* conv = k.library->conv();
      const codegen::ConvDirection direction = conv ? conv->direction : codegen::ConvDirection::Forward;
      std::vector<int> needed = {k.library->out_arg};
      if (direction != codegen::ConvDirection::Forward) needed.push_back(k.library->dy_arg);
      if (direction != codegen::ConvDirection::BackwardData) needed.push_back(k.library->x_arg);
      if (direction != codegen::ConvDirection::BackwardFilter) needed.push_back(k.library->weight_arg);
      for (int arg : needed)
        if (arg < 0 || arg >= static_cast<int>(k.args.size()))
          fail(fmt::format("kernel '{}': library call argument {} out of range", k.name, arg));
      for (int arg : {k.library->bias_arg, k.library->residual_arg, k.library->dy_arg,
                      k.library->x_arg, k.library->weight_arg})
        if (arg >= static_cast<int>(k.args.size()))
          fail(fmt::format("kernel '{}': library call argument {} out of range", k.name, arg));
      // The library reads the bytes as the call's dtype: another buffer type would be misread.
      for (int arg : {k.library->out_arg, k.library->bias_arg, k.library->residual_arg,
                      k.library->dy_arg, k.library->x_arg, k.library->weight_arg}) {
        if (arg < 0) continue;
        // In range: the checks above ran on every argument and buffer id.
        const int id = k.args[static_cast<size_t>(arg)];
        const ir::DType dtype = program.buffers[static_cast<size_t>(id)].type.dtype;
        if (dtype != k.library->dtype)
          fail(fmt::format("kernel '{}': library call on {} tensors, and its argument {} is {}",
                           k.name, ir::dtype_name(k.library->dtype), arg, ir::dtype_name(dtype)));
      }
    }
  }
  validate_dynamic_dims(program, fail);
  for (int id : program.outputs) check_id(id, "an output");
  if (program.output_names.size() != program.outputs.size())
    fail(fmt::format("{} outputs and {} output names", program.outputs.size(), program.output_names.size()));
  for (const auto& update : program.state_updates) {
    check_id(update.output, "a state update");
    check_id(update.parameter, "a state update");
    if (program.buffers[update.output].type != program.buffers[update.parameter].type)
      fail("state update '" + program.buffers[update.output].name + "' has another type than its parameter");
  }
}

}  // namespace kiln::runtime
