// The random graph generator of fusion_differential_test.cpp (the file comment there says what
// it builds and why): seeded chains of GEMMs, epilogues, elementwise math, reductions, shape
// ops and backward ops, with shared values, reused inputs and exporter-style names.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/op_registry.h"

namespace kiln::random_graphs {

using ir::Shape;
using ir::Value;

constexpr int kChainsPerGraph = 8;
constexpr int kMinSteps = 3;
constexpr int kMaxSteps = 7;
constexpr int kMaxDim = 9;
constexpr int kMaxRank = 4;
// Keeps a chain's tensors small, so the host backend runs the suite in moments.
constexpr int64_t kMaxElements = 2048;

class RandomGraph {
 public:
  explicit RandomGraph(uint32_t seed) : rng_(seed) { graph_.name = fmt::format("random_{}", seed); }

  ir::Graph build(int chains) {
    for (chain_ = 0; chain_ < chains; ++chain_) build_chain();
    return std::move(graph_);
  }

 private:
  // --- randomness --------------------------------------------------------------------------------
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(uniform_int(0, static_cast<int>(items.size()) - 1))];
  }

  // A dim: any size, or in half the chains one of two sizes, so that dims often coincide (one
  // tensor then fits several roles: a bias on one axis and a broadcast operand on another).
  int64_t dim() { return palette_.empty() ? uniform_int(1, kMaxDim) : pick(palette_); }

  Shape random_shape(int min_rank, int max_rank) {
    while (true) {
      Shape shape(static_cast<size_t>(uniform_int(min_rank, max_rank)));
      for (int64_t& d : shape) d = dim();
      if (ir::num_elements(shape) <= kMaxElements / 2) return shape;
    }
  }

  // `count` as a product of `rank` dims: its prime factors dealt to random dims.
  Shape factorization(int64_t count, int rank) {
    Shape shape(static_cast<size_t>(rank), 1);
    for (int64_t p = 2; count > 1; ++p)
      for (; count % p == 0; count /= p) shape[static_cast<size_t>(uniform_int(0, rank - 1))] *= p;
    return shape;
  }

  // --- values ------------------------------------------------------------------------------------
  // "c3.v7": the chain, the kind (x input, p parameter, v node result) and a number. Now and
  // then a name built from an earlier one, as exporters write them ("conv1/out:0"), that a C
  // identifier or a derived name could confuse with it: "c3.v7" and "c3_v7" or "c3/v7" are
  // both c3_v7 in C; "c3.v7_index", "c3.v74" and "c3.v7_v" look like locals named after c3.v7;
  // make_kernel renames the values a kernel replaces to "c3.v7.fused".
  std::string next_name(const char* kind) {
    std::vector<const Value*> earlier(seen_.begin(), seen_.end());
    earlier.insert(earlier.end(), leaves_.begin(), leaves_.end());
    if (!earlier.empty() && chance(0.12)) {
      std::string name = pick(earlier)->name;
      const std::string variant =
          pick<std::string>({"_", "/", ":", "4", "_v", "_index", ".fused", ".1"});
      if (variant.size() == 1 && !std::isdigit(static_cast<unsigned char>(variant[0])))
        std::replace(name.begin(), name.end(), '.', variant[0]);
      else
        name += variant;
      if (graph_.find_value(name) == nullptr) return name;
    }
    std::string name;
    do name = fmt::format("c{}.{}{}", chain_, kind, next_id_++);
    while (graph_.find_value(name) != nullptr);  // "c0.v1" + "4" took "c0.v14"
    return name;
  }

  Value* input(Shape shape) {
    Value* value =
        graph_.add_input(next_name("x"), ir::TensorType{ir::DType::F32, std::move(shape)});
    leaves_.push_back(value);
    return value;
  }

  Value* param(Shape shape, std::string kind, ir::AttrMap args) {
    if (kind != "constant") args["seed"] = int64_t{next_seed_++};
    return graph_.add_parameter(next_name("p"), ir::TensorType{ir::DType::F32, std::move(shape)},
                                ir::InitializerSpec{std::move(kind), std::move(args)});
  }
  // A GEMM weight: N(0, sqrt(2 / fan_in)), so activations keep their scale.
  Value* weight(Shape shape) { return param(std::move(shape), "he_normal", {}); }
  // A bias, a residual, a broadcast operand. Now and then one the chain already read (a
  // kernel may then read one input in two ways: as a bias and by broadcasting).
  Value* small(Shape shape) {
    if (Value* again = reuse(leaves_, shape)) return again;
    Value* value = param(std::move(shape), "uniform", {{"low", -0.5}, {"high", 0.5}});
    leaves_.push_back(value);
    return value;
  }
  // Bounded away from 0: a divisor, a scale.
  Value* positive(Shape shape) {
    if (Value* again = reuse(positives_, shape)) return again;
    Value* value = param(std::move(shape), "uniform", {{"low", 0.5}, {"high", 2.0}});
    positives_.push_back(value);
    return value;
  }
  // Sometimes a value of `candidates` that has `shape`.
  Value* reuse(const std::vector<Value*>& candidates, const Shape& shape) {
    if (!chance(0.25)) return nullptr;
    std::vector<Value*> fits;
    for (Value* value : candidates)
      if (value->type.shape == shape) fits.push_back(value);
    return fits.empty() ? nullptr : pick(fits);
  }
  Value* constant(Shape shape, double value) {
    return param(std::move(shape), "constant", {{"value", value}});
  }

  Value* node(const std::string& op, std::vector<Value*> inputs, ir::AttrMap attrs = {}) {
    const ir::OpDef* def = ir::OpRegistry::instance().find(op);
    KILN_CHECK(def) << "unknown op " << op;
    std::vector<ir::TensorType> types;
    for (const Value* operand : inputs) types.push_back(operand->type);
    std::vector<ir::TensorType> results;
    try {
      results = ir::infer_op(*def, types, attrs);
    } catch (const ir::OpError& error) {
      std::string operands;
      for (const ir::TensorType& type : types) operands += " " + type.to_string();
      KILN_CHECK(false) << "generator bug: " << op << operands << ": " << error.message;
    }
    const std::string name = next_name("v");
    ir::Node* added =
        graph_.add_node(*ir::find_op_id(op), name, std::move(inputs), std::move(attrs), {{name, results[0]}});
    Value* result = added->results[0];
    seen_.push_back(result);
    return result;
  }

  size_t users(const Value* value) const { return graph_.users(value).size(); }

  // An operand for a binary op with `x`: a shape that broadcasts to x's (some dims 1, leading
  // dims dropped), now and then x's shape with a leading dim more (x is then broadcast up);
  // from a graph input, a parameter, or an earlier value of the chain with one user.
  Value* other_operand(const Value* x, bool positive_only) {
    const Shape& shape = x->type.shape;
    std::vector<Value*> earlier;
    for (Value* value : seen_)
      if (value != x && users(value) == 1 && !positive_only &&
          ir::broadcast_shapes(value->type.shape, shape) == shape)
        earlier.push_back(value);
    if (!earlier.empty() && chance(0.3)) return pick(earlier);
    std::vector<Value*> leaves;  // graph inputs and parameters the chain already read
    for (Value* value : positive_only ? positives_ : leaves_)
      if (ir::broadcast_shapes(value->type.shape, shape) == shape) leaves.push_back(value);
    if (!leaves.empty() && chance(0.2)) return pick(leaves);
    Shape other;
    if (!positive_only && shape.size() < kMaxRank &&
        ir::num_elements(shape) * kMaxDim <= kMaxElements && chance(0.1)) {
      other = shape;
      other.insert(other.begin(), uniform_int(2, 3));
    } else {
      const size_t dropped = static_cast<size_t>(uniform_int(0, static_cast<int>(shape.size())));
      for (size_t d = dropped; d < shape.size(); ++d) other.push_back(chance(0.35) ? 1 : shape[d]);
    }
    if (positive_only) return positive(other);
    return chance(0.6) ? input(other) : small(other);
  }

  // --- steps -------------------------------------------------------------------------------------
  Value* activation(Value* x) {
    switch (uniform_int(0, 7)) {
      case 7: return node("dropout", {x}, {{"rate", 0.3}});  // inference: the identity
      case 0: return node("relu", {x});
      case 1: return node("leaky_relu", {x}, {{"alpha", uniform(0.01, 0.3)}});
      case 2: return node("sigmoid", {x});
      case 3: return node("tanh", {x});
      case 4: return node("gelu", {x});
      case 5: return node("gelu", {x}, {{"approximate", std::string("tanh")}});
      default: {
        const double low = uniform(-2, 0);
        return node("clip", {x}, {{"min", low}, {"max", low + uniform(0.5, 3)}});
      }
    }
  }

  // abs(x) + 1: at least 1, for sqrt, log and rsqrt.
  Value* at_least_one(Value* x) { return node("add", {node("abs", {x}), constant({1}, 1.0)}); }

  Value* unary_math(Value* x) {
    switch (uniform_int(0, 6)) {
      case 0: return node("exp", {node("clip", {x}, {{"min", -3.0}, {"max", 3.0}})});
      case 1: return node("neg", {x});
      case 2: return node("abs", {x});
      case 3: return node("sqrt", {at_least_one(x)});
      case 4: return node("log", {at_least_one(x)});
      case 5: return node("rsqrt", {at_least_one(x)});
      default: return node("pow", {node("tanh", {x})}, {{"exponent", double(uniform_int(2, 3))}});
    }
  }

  Value* binary(Value* x) {
    const std::string op =
        pick<std::string>({"add", "sub", "mul", "maximum", "minimum", "div", "bias_add"});
    if (op == "bias_add") {
      const int axis = uniform_int(0, x->type.rank() - 1);
      return node("bias_add", {x, small({x->type.shape[static_cast<size_t>(axis)]})},
                  {{"axis", int64_t{axis}}});
    }
    if (op == "div") {
      // Divisors bounded away from 0: a positive parameter, or |y| + 1 of a graph input.
      Value* divisor = chance(0.5) ? other_operand(x, true) : at_least_one(other_operand(x, false));
      return node("div", {x, divisor});
    }
    Value* other = other_operand(x, false);
    return chance(0.7) ? node(op, {x, other}) : node(op, {other, x});
  }

  // x with `rank` dims (the same elements in row-major order).
  Value* reshape_to_rank(Value* x, int rank) {
    if (x->type.rank() == rank) return x;
    return node("reshape", {x}, {{"shape", factorization(ir::num_elements(x->type.shape), rank)}});
  }

  Value* gemm(Value* x) {
    int channel_axis = 0;
    Value* y = nullptr;
    switch (uniform_int(0, 2)) {
      case 0:
        y = conv2d(x);
        channel_axis = 1;
        break;
      case 1:
        y = dense(x);
        channel_axis = y->type.rank() - 1;
        break;
      default:
        y = matmul(x);
        channel_axis = y->type.rank() - 1;
        break;
    }
    for (int steps = uniform_int(0, 3); steps > 0; --steps) y = epilogue_step(y, channel_axis);
    return y;
  }

  Value* conv2d(Value* x) {
    x = reshape_to_rank(x, 4);
    const Shape& s = x->type.shape;
    const int64_t c = s[1], h = s[2], w = s[3];
    int64_t groups = 1;
    int64_t out = dim();
    if (c % 2 == 0 && chance(0.2)) {
      groups = 2;
      out = 2 * uniform_int(1, 4);
    }
    std::vector<int64_t> pad = {uniform_int(0, 1), uniform_int(0, 1), uniform_int(0, 1),
                                uniform_int(0, 1)};
    const int64_t kh = std::min<int64_t>(uniform_int(1, 3), h + pad[0] + pad[2]);
    const int64_t kw = std::min<int64_t>(uniform_int(1, 3), w + pad[1] + pad[3]);
    ir::AttrMap attrs = {{"stride", std::vector<int64_t>{uniform_int(1, 2), uniform_int(1, 2)}},
                         {"pad", pad}};
    if (groups > 1) attrs["groups"] = groups;
    std::vector<Value*> operands = {x, weight({out, c / groups, kh, kw})};
    if (chance(0.3)) operands.push_back(small({out}));
    return node("conv2d", operands, attrs);
  }

  Value* dense(Value* x) {
    const int64_t k = x->type.shape.back();
    const int64_t n = dim();
    std::vector<Value*> operands = {x, weight({n, k})};
    if (chance(0.4)) operands.push_back(small({n}));
    return node("dense", operands);
  }

  Value* matmul(Value* x) {
    if (x->type.rank() < 2) x = reshape_to_rank(x, 2);
    const bool transpose_a = chance(0.3), transpose_b = chance(0.3);
    const Shape& s = x->type.shape;
    const size_t rank = s.size();
    const int64_t k = transpose_a ? s[rank - 2] : s[rank - 1];
    const int64_t n = dim();
    Shape b = transpose_b ? Shape{n, k} : Shape{k, n};
    if (rank > 2 && chance(0.4))  // batch dims of its own, some broadcast
      for (size_t d = rank - 2; d-- > 0;) b.insert(b.begin(), chance(0.5) ? s[d] : 1);
    else if (rank == 2 && chance(0.2))  // x broadcast over b's batch
      b.insert(b.begin(), uniform_int(2, 3));
    ir::AttrMap attrs;
    if (transpose_a) attrs["transpose_a"] = true;
    if (transpose_b) attrs["transpose_b"] = true;
    Value* other = chance(0.5) ? weight(b) : input(b);
    if (rank == 2 && !transpose_a && chance(0.25)) {  // x as the right operand: other^T @ x
      attrs = {{"transpose_a", true}};
      other = chance(0.5) ? weight({s[0], n}) : input({s[0], n});
      return node("matmul", {other, x}, attrs);
    }
    return node("matmul", {x, other}, attrs);
  }

  // One step of what a GEMM epilogue may apply (and some it may not: a bias on another axis).
  Value* epilogue_step(Value* y, int channel_axis) {
    const Shape& s = y->type.shape;
    const int64_t channels = s[static_cast<size_t>(channel_axis)];
    Shape per_channel(s.size() - static_cast<size_t>(channel_axis), 1);
    per_channel[0] = channels;
    if (chance(0.3)) per_channel.insert(per_channel.begin(), static_cast<size_t>(channel_axis), 1);
    switch (uniform_int(0, 7)) {
      case 0: return node("bias_add", {y, small({channels})}, {{"axis", int64_t{channel_axis}}});
      case 1: return node("add", {y, small(per_channel)});
      case 2: {  // a residual: another chain value of y's shape when there is one
        for (Value* value : seen_)
          if (value != y && value->type.shape == s && users(value) == 1 && chance(0.5))
            return node("add", {value, y});
        return node("add", {y, input(s)});
      }
      case 3:
        return node(pick<std::string>({"mul", "sub", "maximum", "minimum"}),
                    {y, chance(0.5) ? small(per_channel) : constant({}, uniform(-1, 1))});
      case 4: return node("div", {y, positive(chance(0.5) ? per_channel : Shape{1})});
      case 5: {  // bias_add on some other axis: not the epilogue's channel
        const int axis = uniform_int(0, static_cast<int>(s.size()) - 1);
        return node("bias_add", {y, small({s[static_cast<size_t>(axis)]})},
                    {{"axis", int64_t{axis}}});
      }
      default: return activation(y);
    }
  }

  Value* reduction(Value* x) {
    const int rank = x->type.rank();
    const Shape& s = x->type.shape;
    const int64_t axis = uniform_int(-rank, rank - 1);
    switch (uniform_int(0, 5)) {
      case 0: return node("softmax", {x}, {{"axis", axis}});
      case 1: return node("log_softmax", {x}, {{"axis", axis}});
      case 2: {
        const size_t from = static_cast<size_t>(axis < 0 ? axis + rank : axis);
        const Shape normalized(s.begin() + static_cast<std::ptrdiff_t>(from), s.end());
        ir::AttrMap attrs = {{"axis", axis}};
        // A row of nearly equal values divides float rounding by a tiny deviation; a larger
        // epsilon bounds that amplification (the oracle and the kernel round differently).
        attrs["epsilon"] = pick<double>({1e-5, 1e-3, 1e-2});
        Value* scale = positive(normalized);
        return node("layer_norm", {x, scale, chance(0.15) ? scale : small(normalized)}, attrs);
      }
      case 3:
        if (rank == 4 && chance(0.5)) return node("global_avg_pool", {x});
        [[fallthrough]];
      default: {
        std::vector<int64_t> axes;
        for (int d = 0; d < rank; ++d)
          if (chance(0.5)) axes.push_back(chance(0.3) ? d - rank : d);
        std::shuffle(axes.begin(), axes.end(), rng_);
        // Keep a dim unless reducing all of them to a scalar on purpose.
        const bool keepdims = chance(0.4) ||
                              (static_cast<int>(axes.size()) == rank && chance(0.5)) ||
                              (axes.empty() && chance(0.7));
        ir::AttrMap attrs = {{"axes", axes}};
        if (keepdims) attrs["keepdims"] = true;
        return node(pick<std::string>({"reduce_sum", "reduce_mean", "reduce_max"}), {x}, attrs);
      }
    }
  }

  Value* shape_op(Value* x) {
    const int rank = x->type.rank();
    const Shape& s = x->type.shape;
    switch (uniform_int(0, 4)) {
      case 3: {  // slice one axis (a negative start now and then)
        const int axis = uniform_int(0, rank - 1);
        const int64_t size = s[static_cast<size_t>(axis)];
        const int64_t start = uniform_int(0, static_cast<int>(size) - 1);
        const int64_t end = uniform_int(static_cast<int>(start) + 1, static_cast<int>(size));
        return node("slice", {x},
                    {{"starts", std::vector<int64_t>{chance(0.3) ? start - size : start}},
                     {"ends", std::vector<int64_t>{end}},
                     {"axes", std::vector<int64_t>{axis}},
                     {"steps", std::vector<int64_t>{uniform_int(1, 2)}}});
      }
      case 4: {  // concat with a graph input along one axis
        const int axis = uniform_int(0, rank - 1);
        Shape other = s;
        other[static_cast<size_t>(axis)] = uniform_int(1, 3);
        Value* y = input(other);
        return chance(0.5) ? node("concat", {x, y}, {{"axis", int64_t{axis}}})
                           : node("concat", {y, x}, {{"axis", int64_t{axis - rank}}});
      }
      case 0: {
        Shape shape = factorization(ir::num_elements(x->type.shape), uniform_int(1, kMaxRank));
        if (chance(0.3))
          shape[static_cast<size_t>(uniform_int(0, static_cast<int>(shape.size()) - 1))] = -1;
        return node("reshape", {x}, {{"shape", shape}});
      }
      case 1: return node("flatten", {x}, {{"axis", int64_t{uniform_int(0, rank)}}});
      default: {
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        return chance(0.2) ? node("transpose", {x}) : node("transpose", {x}, {{"perm", perm}});
      }
    }
  }

  Value* pool(Value* x) {
    x = reshape_to_rank(x, 4);
    const Shape& s = x->type.shape;
    const int64_t kh = uniform_int(1, static_cast<int>(std::min<int64_t>(3, s[2])));
    const int64_t kw = uniform_int(1, static_cast<int>(std::min<int64_t>(3, s[3])));
    ir::AttrMap attrs = {{"kernel", std::vector<int64_t>{kh, kw}}};
    if (chance(0.5)) attrs["stride"] = std::vector<int64_t>{uniform_int(1, 2), uniform_int(1, 2)};
    if (chance(0.4))
      attrs["pad"] = std::vector<int64_t>{
          uniform_int(0, static_cast<int>(kh / 2)), uniform_int(0, static_cast<int>(kw / 2)),
          uniform_int(0, static_cast<int>(kh / 2)), uniform_int(0, static_cast<int>(kw / 2))};
    if (chance(0.3)) {
      if (chance(0.5)) attrs["count_include_pad"] = false;
      return node("avg_pool2d", {x}, attrs);
    }
    Value* pooled = node("max_pool2d", {x}, attrs);
    // A reshape after a pool makes a "single" kernel: the pool stores the reshaped type.
    return chance(0.5) ? node("flatten", {pooled}) : pooled;
  }

  Value* elementwise(Value* x) { return chance(0.5) ? activation(x) : unary_math(x); }

  // x read by two nodes whose results meet again. Not by sub: gelu(x) - gelu_tanh(x) is all
  // cancellation, about 1e-4 of its operands, and would measure their rounding, not fusion.
  Value* diamond(Value* x) {
    Value* a = elementwise(x);
    Value* b = chance(0.6) ? elementwise(x) : x;
    return node(pick<std::string>({"add", "mul", "maximum", "minimum"}), {a, b});
  }

  // A backward op as training graphs hold them (ir/ops/grad_ops.cpp): x plays the upstream
  // gradient dy; the saved forward value is a graph input or parameter of x's shape, or the
  // forward op's result computed here from one (it then fuses into the backward op's loop).
  Value* backward(Value* x) {
    const Shape& s = x->type.shape;
    Value* saved = chance(0.6) ? input(s) : small(s);
    const int64_t axis = uniform_int(-x->type.rank(), x->type.rank() - 1);
    switch (uniform_int(0, 10)) {
      case 0: return node("relu_grad", {x, saved});
      case 1: return node("leaky_relu_grad", {x, saved}, {{"alpha", uniform(0.01, 0.3)}});
      case 2: return node("sigmoid_grad", {x, node("sigmoid", {saved})});
      case 3: return node("tanh_grad", {x, node("tanh", {saved})});
      case 4:
        return node("gelu_grad", {x, saved},
                    {{"approximate", std::string(chance(0.5) ? "tanh" : "none")}});
      case 5: return node("abs_grad", {x, saved});
      case 6: return node("clip_grad", {x, saved}, {{"min", uniform(-1, 0)}, {"max", uniform(0, 1)}});
      case 7: return node("scale", {x}, {{"factor", uniform(-2, 2)}});
      case 8: {
        const bool log_form = chance(0.5);
        Value* y = node(log_form ? "log_softmax" : "softmax", {saved}, {{"axis", axis}});
        return node(log_form ? "log_softmax_grad" : "softmax_grad", {x, y}, {{"axis", axis}});
      }
      case 9: {  // a bias broadcast explicitly, then added
        Shape row(s.size(), 1);
        row.back() = s.back();
        Value* rows = node("broadcast_to", {small(row)}, {{"shape", std::vector<int64_t>(s)}});
        return node("add", {x, rows});
      }
      default: {
        const bool max_form = chance(0.5);
        Value* other = other_operand(x, false);
        return node(max_form ? "maximum_share" : "minimum_share",
                    chance(0.7) ? std::vector<Value*>{x, other} : std::vector<Value*>{other, x});
      }
    }
  }

  // x + f(x): x read by the chain and by the add.
  Value* residual(Value* x) {
    Value* y = chance(0.5) ? gemm_preserving(x) : elementwise(x);
    if (chance(0.5)) y = elementwise(y);
    return node("add", {y, x});
  }

  // A GEMM whose result has x's shape: a square dense, or a same-padded 3x3/1x1 conv.
  Value* gemm_preserving(Value* x) {
    if (x->type.rank() == 4 && chance(0.5)) {
      const int64_t c = x->type.shape[1];
      const int64_t k = chance(0.5) ? 3 : 1;
      const int64_t p = k / 2;
      return node("conv2d", {x, weight({c, c, k, k})}, {{"pad", std::vector<int64_t>{p, p, p, p}}});
    }
    const int64_t k = x->type.shape.back();
    return node("dense", {x, weight({k, k}), small({k})});
  }

  Value* step(Value* x) {
    if (x->type.rank() == 0) return node("add", {input(random_shape(1, 3)), x});  // broadcast up
    const int pick_step = uniform_int(0, 99);
    if (pick_step < 16) return activation(x);
    if (pick_step < 28) return unary_math(x);
    if (pick_step < 44) return binary(x);
    if (pick_step < 60) return gemm(x);
    if (pick_step < 72) return reduction(x);
    if (pick_step < 80) return shape_op(x);
    if (pick_step < 86) return pool(x);
    if (pick_step < 93) return diamond(x);
    if (pick_step < 97) return residual(x);
    return backward(x);
  }

  void output(Value* value) {
    if (value->role == ir::ValueRole::NodeResult && !graph_.is_output(value)) {
      graph_.outputs.push_back(value);
      graph_.output_names.push_back(value->name);
    }
  }

  void build_chain() {
    seen_.clear();
    leaves_.clear();
    positives_.clear();
    palette_.clear();
    if (chance(0.5)) palette_ = {uniform_int(1, kMaxDim), uniform_int(2, kMaxDim)};
    Value* x = input(random_shape(1, kMaxRank));
    for (int steps = uniform_int(kMinSteps, kMaxSteps); steps > 0; --steps) {
      Value* next = step(x);
      if (ir::num_elements(next->type.shape) > kMaxElements)
        next = node("reduce_mean", {next}, {{"axes", std::vector<int64_t>{0}}});
      // Now and then an intermediate is a graph output: stored whatever fusion would like.
      if (chance(0.15)) output(x);
      // Now and then one is also returned widened to f64: a cast beside the value's other
      // reader, which the value's loop kernel then stores too (fuse-elementwise).
      if (x->role == ir::ValueRole::NodeResult && x->type.dtype == ir::DType::F32 && chance(0.08))
        output(node("cast", {x}, {{"to", std::string("f64")}}));
      x = next;
    }
    output(x);
  }

  std::mt19937 rng_;
  ir::Graph graph_;
  int chain_ = 0;
  int next_id_ = 0;
  int64_t next_seed_ = 1;
  // The current chain's node results, graph inputs and parameters (but GEMM weights), and its
  // parameters bounded away from 0.
  std::vector<Value*> seen_, leaves_, positives_;
  std::vector<int64_t> palette_;  // the chain's dims, or empty: any
};

}  // namespace kiln::random_graphs
