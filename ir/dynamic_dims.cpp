#include "ir/dynamic_dims.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/image_layout.h"
#include "ir/op_registry.h"

namespace kiln::ir {

bool has_dynamic_dims(const DimMap& dims) {
  return std::any_of(dims.begin(), dims.end(), [](const DynamicDim& d) { return d.is_dynamic(); });
}

std::string dim_name(const DynamicDim& dim, const std::vector<DimSymbol>& symbols) {
  std::string text = symbols[static_cast<size_t>(dim.symbol)].name;
  if (dim.outer != 1) text = std::to_string(dim.outer) + "*" + text;
  if (dim.inner != 1) text += "*" + std::to_string(dim.inner);
  return text;
}

std::string type_with_dims(const std::string& dtype, const std::vector<int64_t>& shape,
                           const DimMap& dims, const std::vector<DimSymbol>& symbols) {
  std::string text = dtype + "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) text += ",";
    const bool dynamic = d < dims.size() && dims[d].is_dynamic() &&
                         dims[d].symbol < static_cast<int>(symbols.size());
    if (!dynamic) {
      text += std::to_string(shape[d]);
      continue;
    }
    text += dim_name(dims[d], symbols) + "<=" + std::to_string(shape[d]);
  }
  return text + "]";
}

namespace {

using ValueDims = std::unordered_map<const Value*, DimMap>;

// The analysis of one graph (or one fused kernel's body), node by node in order.
class Propagation {
 public:
  Propagation(const std::vector<DimSymbol>& symbols, ValueDims& dims)
      : symbols_(symbols), dims_(dims) {}

  void run(const Graph& graph) {
    for (const auto& node : graph.nodes()) visit(*node);
  }

 private:
  // The dims of `value`: all static unless the map says otherwise.
  DimMap of(const Value* value) const {
    auto it = dims_.find(value);
    if (it != dims_.end()) return it->second;
    return DimMap(static_cast<size_t>(value->type.rank()));
  }

  bool dynamic(const Value* value) const { return dims_.count(value) > 0; }

  void set(const Value* value, DimMap dims) {
    if (has_dynamic_dims(dims)) dims_[value] = std::move(dims);
  }

  std::string name(const DynamicDim& dim) const { return "'" + dim_name(dim, symbols_) + "'"; }

  [[noreturn]] void refuse(const Node& node, const std::string& why) const {
    throw Error(node.loc.render(), node.describe() + ": " + why +
                                       "; padding a dynamic dim to its bound would change the "
                                       "result (ir/dynamic_dims.h)");
  }

  // Refuses when dim `axis` of operand `index` is dynamic; `what` says what the op does there.
  void require_static(const Node& node, size_t index, int64_t axis, const std::string& what) const {
    const DimMap dims = of(node.inputs[index]);
    if (axis >= 0 && axis < static_cast<int64_t>(dims.size()) && dims[axis].is_dynamic())
      refuse(node, fmt::format("{} (axis {} of {} '%{}') is the dynamic dim {}", what, axis,
                               node.def->input_names.size() > index ? node.def->input_names[index]
                                                                    : "operand",
                               node.inputs[index]->name, name(dims[axis])));
  }

  void require_all_static(const Node& node, size_t first, const std::string& what) const {
    for (size_t i = first; i < node.inputs.size(); ++i)
      for (int64_t d = 0; d < node.inputs[i]->type.rank(); ++d) require_static(node, i, d, what);
  }

  // Joins dim `d` of an operand into dim `out` of a result: two different dynamic dims meet.
  void join(const Node& node, DynamicDim& out, const DynamicDim& in) const {
    if (!in.is_dynamic()) return;
    if (out.is_dynamic() && out != in)
      refuse(node, "operands pair the dynamic dims " + name(out) + " and " + name(in));
    out = in;
  }

  static int64_t normalize(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

  int64_t int_attr(const Node& node, const char* key) const {
    return std::get<int64_t>(node.attrs.at(key));
  }
  const std::vector<int64_t>& ints_attr(const Node& node, const char* key) const {
    return std::get<std::vector<int64_t>>(node.attrs.at(key));
  }

  // NumPy broadcasting: operands align at their last dims.
  DimMap broadcast(const Node& node, const std::vector<const Value*>& operands, int64_t rank) const {
    DimMap out(static_cast<size_t>(rank));
    for (const Value* operand : operands) {
      const DimMap dims = of(operand);
      const int64_t offset = rank - static_cast<int64_t>(dims.size());
      for (size_t d = 0; d < dims.size(); ++d)
        if (offset + static_cast<int64_t>(d) >= 0) join(node, out[offset + d], dims[d]);
    }
    return out;
  }

  // An op that reduces, normalizes or contracts over `axes` of operand 0 and keeps the others.
  DimMap keep_other_axes(const Node& node, const std::vector<int64_t>& axes, bool keep_reduced,
                         const std::string& what) const {
    DimMap in = of(node.inputs[0]);
    DimMap out;
    for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
        out.push_back(in[d]);
        continue;
      }
      require_static(node, 0, d, what);
      if (keep_reduced) out.push_back({});
    }
    return out;
  }

  // A row-major reshape keeps a dynamic dim's positions apart from the real ones when, seen
  // as [outer, bound, inner], its bound axis survives whole: some result dim q must hold a
  // whole number of the blocks before it (the elements before q divide those before the
  // axis) and of the elements after it. [b, 8, 16] -> [8b, 16] and [12, 4b, 8] -> [48b, 8]
  // keep it; [b, 3] -> [3, b] (unlike a transpose) scatters it, and is refused.
  DimMap reshape(const Node& node) const {
    const Shape& in = node.inputs[0]->type.shape;
    const Shape& out = node.results[0]->type.shape;
    const DimMap dims = of(node.inputs[0]);
    DimMap result(out.size());
    const int64_t total = num_elements(in);
    for (size_t p = 0; p < in.size(); ++p) {
      if (!dims[p].is_dynamic()) continue;
      const int64_t bound = symbols_[static_cast<size_t>(dims[p].symbol)].bound;
      // Elements before and after the bound axis, in the expanded view.
      const int64_t before = std::accumulate(in.begin(), in.begin() + p, int64_t{1}, std::multiplies<>()) * dims[p].outer;
      const int64_t after = total / before / bound;
      std::optional<size_t> landing;
      int64_t prefix = 1;
      for (size_t q = 0; q < out.size() && !landing; prefix *= out[q], ++q) {
        const int64_t suffix = total / prefix / out[q];
        if (before % prefix != 0 || after % suffix != 0 || result[q].is_dynamic()) continue;
        const int64_t outer = before / prefix, inner = after / suffix;
        if (outer * bound * inner == out[q]) {
          landing = q;
          result[q] = {dims[p].symbol, outer, inner};
        }
      }
      if (!landing)
        refuse(node, fmt::format("it reshapes {} to {}, which splits the dynamic dim {} (axis {})",
                                 shape_to_string(in), shape_to_string(out), name(dims[p]), p));
    }
    return result;
  }

  void visit(const Node& node) {
    const bool any_dynamic =
        std::any_of(node.inputs.begin(), node.inputs.end(), [&](const Value* v) { return dynamic(v); });
    if (node.is_kernel()) {
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (dynamic(node.inputs[i])) dims_[node.body->inputs[i]] = dims_[node.inputs[i]];
      run(*node.body);
      for (size_t i = 0; i < node.results.size(); ++i) set(node.results[i], of(node.body->outputs[i]));
      return;
    }
    if (!any_dynamic) return;
    const std::string& rule = node.def->type_rule;
    const int64_t rank = node.inputs[0]->type.rank();
    const Value* result = node.results[0];
    const int64_t result_rank = result->type.rank();

    if (rule == "infer_float_unary" || rule == "infer_numeric_unary" || rule == "infer_clip" ||
        rule == "infer_cast" || rule == "infer_float_predicate" || rule == "infer_dropout") {
      set(result, of(node.inputs[0]));
    } else if (rule == "infer_binary" || rule == "infer_float_binary" ||
               rule == "infer_unsigned_binary" || rule == "infer_compare" ||
               rule == "infer_logical" || rule == "infer_where" || rule == "infer_like_dy" ||
               rule == "infer_share" || rule == "infer_broadcast_to") {
      set(result, broadcast(node, {node.inputs.begin(), node.inputs.end()}, result_rank));
    } else if (rule == "infer_bias_add") {
      require_all_static(node, 1, "the bias");
      set(result, of(node.inputs[0]));
    } else if (rule == "infer_batch_norm") {
      if (std::get<bool>(node.attrs.at("training")))
        refuse(node, "batch statistics mix every position of a dynamic dim");
      require_static(node, 0, 1, "the channel axis");
      require_all_static(node, 1, "a per-channel operand");
      set(result, of(node.inputs[0]));
    } else if (rule == "infer_softmax" || rule == "infer_arg_reduce") {
      const bool keep = rule == "infer_softmax" || std::get<bool>(node.attrs.at("keepdims"));
      set(result, keep_other_axes(node, {normalize(int_attr(node, "axis"), rank)}, keep,
                                  "the axis it reduces over"));
    } else if (rule == "infer_reduce_numeric" || rule == "infer_reduce_float") {
      std::vector<int64_t> axes = ints_attr(node, "axes");
      if (axes.empty())
        for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
      for (int64_t& axis : axes) axis = normalize(axis, rank);
      set(result, keep_other_axes(node, axes, std::get<bool>(node.attrs.at("keepdims")),
                                  "an axis it reduces over"));
    } else if (rule == "infer_layer_norm") {
      std::vector<int64_t> axes;
      for (int64_t d = normalize(int_attr(node, "axis"), rank); d < rank; ++d) axes.push_back(d);
      require_all_static(node, 1, "a per-feature operand");
      set(result, keep_other_axes(node, axes, true, "an axis it normalizes over"));
    } else if (rule == "infer_dense") {
      require_all_static(node, 1, "a weight");
      DimMap out = keep_other_axes(node, {rank - 1}, true, "the axis it contracts");
      // Split-K partials stack a static chunk axis in front of the result's own.
      if (int_attr(node, "k_chunk") > 0) out.insert(out.begin(), DimMap::value_type{});
      set(result, out);
    } else if (rule == "infer_matmul") {
      visit_matmul(node);
    } else if (rule == "infer_conv2d" || rule == "infer_max_pool2d" ||
               rule == "infer_avg_pool2d" || rule == "infer_global_avg_pool") {
      const bool conv = rule == "infer_conv2d";
      require_all_static(node, 1, "a weight");
      const bool nhwc = image_layout(node) == ImageLayout::Nhwc;
      if (conv) require_static(node, 0, nhwc ? 3 : 1, "the channel axis it contracts");
      DimMap out = keep_other_axes(node, nhwc ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 3}, true,
                                   "a spatial axis of its window");
      // Split-K partials stack a static chunk axis in front of the result's own.
      if (conv && int_attr(node, "k_chunk") > 0) out.insert(out.begin(), DimMap::value_type{});
      set(result, out);
    } else if (rule == "infer_reshape" || rule == "infer_flatten") {
      set(result, reshape(node));
    } else if (rule == "infer_transpose") {
      std::vector<int64_t> perm = ints_attr(node, "perm");
      if (perm.empty())
        for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
      const DimMap in = of(node.inputs[0]);
      DimMap out;
      for (int64_t p : perm) out.push_back(in[static_cast<size_t>(normalize(p, rank))]);
      set(result, out);
    } else if (rule == "infer_concat") {
      const int64_t axis = normalize(int_attr(node, "axis"), rank);
      DimMap out(static_cast<size_t>(rank));
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        require_static(node, i, axis, "the axis it joins along");
        const DimMap dims = of(node.inputs[i]);
        for (int64_t d = 0; d < rank; ++d) join(node, out[d], dims[d]);
      }
      set(result, out);
    } else if (rule == "infer_slice") {
      visit_slice(node);
    } else if (rule == "infer_gather") {
      const int64_t axis = normalize(int_attr(node, "axis"), rank);
      require_static(node, 0, axis, "the axis it gathers along");
      const DimMap x = of(node.inputs[0]);
      const DimMap indices = of(node.inputs[1]);
      DimMap out(x.begin(), x.begin() + axis);
      out.insert(out.end(), indices.begin(), indices.end());
      out.insert(out.end(), x.begin() + axis + 1, x.end());
      set(result, out);
    } else if (rule == "infer_gather_elements") {
      const int64_t axis = normalize(int_attr(node, "axis"), rank);
      require_static(node, 0, axis, "the axis it gathers along");
      set(result, broadcast(node, {node.inputs[0], node.inputs[1]}, result_rank));
    } else if (rule == "infer_attention") {
      visit_attention(node);
    } else {
      refuse(node, fmt::format("{} ({}) does not support dynamic dims", node.op_name(),
                               node.def->type_rule_words));
    }
  }

  // a [..., M, K] @ b [..., K, N] (either transposed): batch dims broadcast, M and N carry over,
  // K is contracted.
  void visit_matmul(const Node& node) {
    DimMap a = of(node.inputs[0]);
    DimMap b = of(node.inputs[1]);
    const size_t ra = a.size(), rb = b.size();
    const bool transpose_a = std::get<bool>(node.attrs.at("transpose_a"));
    const bool transpose_b = std::get<bool>(node.attrs.at("transpose_b"));
    require_static(node, 0, static_cast<int64_t>(transpose_a ? ra - 2 : ra - 1), "the axis it contracts");
    require_static(node, 1, static_cast<int64_t>(transpose_b ? rb - 1 : rb - 2), "the axis it contracts");
    const DynamicDim m = a[transpose_a ? ra - 1 : ra - 2];
    const DynamicDim n = b[transpose_b ? rb - 2 : rb - 1];
    const size_t batch = static_cast<size_t>(node.results[0]->type.rank()) - 2;
    DimMap out(batch);
    for (const DimMap* dims : {&a, &b}) {
      const int64_t offset = static_cast<int64_t>(batch) - static_cast<int64_t>(dims->size() - 2);
      for (size_t d = 0; d + 2 < dims->size(); ++d) join(node, out[offset + d], (*dims)[d]);
    }
    out.push_back(m);
    out.push_back(n);
    // Split-K partials stack a static chunk axis in front of the result's own.
    if (int_attr(node, "k_chunk") > 0) out.insert(out.begin(), DimMap::value_type{});
    set(node.results[0], out);
  }

  // A dynamic axis may only be sliced whole (start 0, step 1, to the end): any other slice
  // counts positions from a size that is not known until run time.
  void visit_slice(const Node& node) {
    const Shape& in = node.inputs[0]->type.shape;
    const int64_t rank = static_cast<int64_t>(in.size());
    const DimMap dims = of(node.inputs[0]);
    const auto& axes = ints_attr(node, "axes");
    const auto& starts = ints_attr(node, "starts");
    const auto& steps = ints_attr(node, "steps");
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t d = axes.empty() ? static_cast<int64_t>(i) : normalize(axes[i], rank);
      if (!dims[d].is_dynamic()) continue;
      const int64_t step = steps.empty() ? 1 : steps[i];
      const bool whole = step == 1 && (starts[i] == 0 || starts[i] <= -in[d]) &&
                         node.results[0]->type.shape[d] == in[d];
      if (!whole)
        refuse(node, fmt::format("it slices the dynamic dim {} (axis {}) from {} with step {} to "
                                 "{} of {} positions",
                                 name(dims[d]), d, starts[i], step,
                                 node.results[0]->type.shape[d], in[d]));
    }
    set(node.results[0], dims);
  }

  // q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv], mask [..., Sq, Sk]: batch and head dims and
  // Sq carry over. Padded keys are harmless only under a causal mask over a shared dynamic
  // sequence: query i < n sees keys j <= i < n.
  void visit_attention(const Node& node) {
    const DimMap q = of(node.inputs[0]), k = of(node.inputs[1]), v = of(node.inputs[2]);
    require_static(node, 0, static_cast<int64_t>(q.size()) - 1, "the head dim it contracts");
    require_static(node, 1, static_cast<int64_t>(k.size()) - 1, "the head dim it contracts");
    require_static(node, 2, static_cast<int64_t>(v.size()) - 1, "the value dim");
    const DynamicDim sq = q[q.size() - 2];
    DynamicDim sk = k[k.size() - 2];
    join(node, sk, v[v.size() - 2]);
    if (sk.is_dynamic() && !(std::get<bool>(node.attrs.at("causal")) && sq == sk))
      refuse(node, "the keys' dim is the dynamic dim " + name(sk) +
                       ", which padding extends unless the attention is causal over the same "
                       "dynamic sequence as its queries");
    const size_t batch = static_cast<size_t>(node.results[0]->type.rank()) - 2;
    DimMap out(batch);
    for (const DimMap* dims : {&q, &k, &v}) {
      const int64_t offset = static_cast<int64_t>(batch) - static_cast<int64_t>(dims->size() - 2);
      for (size_t d = 0; d + 2 < dims->size(); ++d) join(node, out[offset + d], (*dims)[d]);
    }
    if (node.inputs.size() > 3) {
      const DimMap mask = of(node.inputs[3]);
      const int64_t offset = static_cast<int64_t>(batch + 2) - static_cast<int64_t>(mask.size());
      for (size_t d = 0; d < mask.size(); ++d) {
        const int64_t at = offset + static_cast<int64_t>(d);
        if (at < static_cast<int64_t>(batch)) join(node, out[at], mask[d]);
        else if (mask[d].is_dynamic() && mask[d] != (at == static_cast<int64_t>(batch) ? sq : sk))
          refuse(node, "the mask's dynamic dim " + name(mask[d]) + " does not match the scores'");
      }
    }
    out.push_back(sq);
    DimMap lse = out;
    out.push_back(v.back());
    set(node.results[0], out);
    if (node.results.size() > 1) set(node.results[1], lse);
  }

  const std::vector<DimSymbol>& symbols_;
  ValueDims& dims_;
};

}  // namespace

std::unordered_map<const Value*, DimMap> infer_dynamic_dims(const Graph& graph) {
  ValueDims dims;
  if (graph.symbols.empty()) return dims;
  for (const Value* input : graph.inputs)
    if (has_dynamic_dims(input->dynamic_dims)) dims[input] = input->dynamic_dims;
  Propagation(graph.symbols, dims).run(graph);
  return dims;
}

std::vector<DimMap> output_dynamic_dims(const Graph& graph) {
  const ValueDims dims = infer_dynamic_dims(graph);
  std::vector<DimMap> outputs;
  for (const Value* output : graph.outputs) {
    auto it = dims.find(output);
    outputs.push_back(it == dims.end() ? DimMap{} : it->second);
  }
  return outputs;
}

void resize_dynamic_dims(Graph& graph, const std::vector<int64_t>& sizes) {
  KILN_CHECK(sizes.size() == graph.symbols.size()) << "one size per symbol";
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 1)
      throw Error("", fmt::format("dynamic dim '{}' must be at least 1, got {}", graph.symbols[i].name, sizes[i]));
  const ValueDims dims = infer_dynamic_dims(graph);  // at the current bounds
  const auto resized = [&](const Value* value) {
    Shape shape = value->type.shape;
    if (auto it = dims.find(value); it != dims.end())
      for (size_t d = 0; d < shape.size(); ++d)
        if (it->second[d].is_dynamic())
          shape[d] = it->second[d].outer * sizes[static_cast<size_t>(it->second[d].symbol)] * it->second[d].inner;
    return shape;
  };
  for (Value* input : graph.inputs) input->type.shape = resized(input);
  for (const auto& node : graph.nodes()) {
    if (node->is_kernel())
      throw Error(node->loc.render(), node->describe() + ": dynamic dims are resized before fusion");
    if (node->op == OpId::Reshape || node->op == OpId::BroadcastTo)
      node->attrs["shape"] = resized(node->results[0]);
    std::vector<TensorType> operand_types;
    for (const Value* operand : node->inputs) operand_types.push_back(operand->type);
    std::vector<TensorType> results;
    try {
      results = infer_op(*node->def, operand_types, node->attrs);
    } catch (const OpError& error) {
      throw Error(node->loc.render(), node->describe() + ": " + error.message);
    }
    KILN_CHECK(results.size() == node->results.size()) << node->describe() << ": result count changed";
    for (size_t i = 0; i < results.size(); ++i) {
      KILN_CHECK(results[i].shape == resized(node->results[i]))
          << node->describe() << ": resized to " << results[i].to_string() << ", the analysis says "
          << shape_to_string(resized(node->results[i]));
      node->results[i]->type = results[i];
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) graph.symbols[i].bound = sizes[i];
}

void drop_dynamic_dims(Graph& graph) {
  graph.symbols.clear();
  for (Value* input : graph.inputs) input->dynamic_dims.clear();
}

}  // namespace kiln::ir
