// ONNX's recurrent layers (RNN, GRU, LSTM) unrolled over the sequence at import.
//
// The sequence length is static once the input shapes are known, so a layer becomes T copies
// of its cell: kiln ops (matmul, add, the activations) with no loop construct in the IR. The
// input projections of all time steps are one matmul per gate up front ([T * batch, input] by
// the gate's weights); each step then adds its recurrent matmul. sequence_lens masks the steps
// past a batch entry's length: its state stops changing and its Y rows are zero, as ONNX
// specifies (a reverse direction starts at the entry's last step, because the masked steps
// before it leave the initial state untouched).
//
// Gate order in W, R and B follows the spec: RNN i; GRU z, r, h; LSTM i, o, f, c (peepholes
// i, o, f).
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {
namespace {

using ir::OpId;
using Ints = std::vector<int64_t>;
using Outputs = std::vector<Operand>;

// Unrolling makes nodes in proportion to the steps: about this many per step and direction
// (more with sequence_lens' masks). Past kMaxUnrolledNodes, import says so instead of building a
// graph that takes long to import and compile (a loop op in the IR is later work).
constexpr int64_t kMaxUnrolledNodes = int64_t{1} << 15;
constexpr int64_t kNodesPerStep[] = {8, 24, 32};  // RNN, GRU, LSTM

enum class Cell { Rnn, Gru, Lstm };

struct Activation {
  std::string name;  // lower case
  double alpha = 0, beta = 0;
};

Operand slice_axis(NodeContext& node, const Operand& x, int axis, int64_t begin, int64_t end) {
  return node.emit(OpId::Slice, {x}, {{"starts", Ints{begin}}, {"ends", Ints{end}}, {"axes", Ints{axis}},
                                      {"steps", Ints{1}}});
}

// ONNX's activation functions for recurrent layers, by name (case-insensitive, as ONNX
// Runtime reads them), with the defaults of the ops of the same name.
std::vector<Activation> activations(NodeContext& node, Cell cell, int directions) {
  const std::vector<std::string> defaults = cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                            : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const size_t per_direction = defaults.size();
  std::vector<std::string> names;
  if (node.has_attr("activations")) {
    names = node.attr_strings("activations");
  } else {
    for (int d = 0; d < directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (names.size() == per_direction && directions == 2) names.insert(names.end(), names.begin(), names.end());
  if (names.size() != per_direction * static_cast<size_t>(directions))
    node.fail("activations lists " + std::to_string(names.size()) + " functions; this layer takes " +
              std::to_string(per_direction) + " per direction, " + std::to_string(directions) + " direction(s)");
  const std::vector<double> alphas = node.attr_floats("activation_alpha");
  const std::vector<double> betas = node.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> out;
  for (std::string name : names) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    double alpha = 0, beta = 0;
    bool uses_alpha = true, uses_beta = false;
    if (name == "leakyrelu") alpha = 0.01;
    else if (name == "thresholdedrelu" || name == "elu") alpha = 1.0;
    else if (name == "hardsigmoid") alpha = 0.2, beta = 0.5, uses_beta = true;
    else if (name == "affine" || name == "scaledtanh") alpha = 1.0, beta = name == "affine" ? 0.0 : 1.0, uses_beta = true;
    else if (name == "relu" || name == "tanh" || name == "sigmoid" || name == "softsign" || name == "softplus")
      uses_alpha = false;
    else
      node.fail("activation '" + name + "' is not one of ONNX's recurrent activations (Relu, Tanh, Sigmoid, "
                "Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)");
    if (uses_alpha && next_alpha < alphas.size()) alpha = alphas[next_alpha++];
    if (uses_beta && next_beta < betas.size()) beta = betas[next_beta++];
    out.push_back({name, alpha, beta});
  }
  return out;
}

Operand activate(NodeContext& node, const Activation& f, const Operand& x) {
  const ir::DType dtype = x.type().dtype;
  if (f.name == "sigmoid") return node.emit(OpId::Sigmoid, {x});
  if (f.name == "tanh") return node.emit(OpId::Tanh, {x});
  if (f.name == "relu") return node.emit(OpId::Relu, {x});
  if (f.name == "softplus") return node.emit(OpId::Softplus, {x});
  if (f.name == "leakyrelu") return node.emit(OpId::LeakyRelu, {x}, {{"alpha", f.alpha}});
  if (f.name == "elu") return node.emit(OpId::Elu, {x}, {{"alpha", f.alpha}});
  if (f.name == "hardsigmoid") return node.emit(OpId::HardSigmoid, {x}, {{"alpha", f.alpha}, {"beta", f.beta}});
  if (f.name == "thresholdedrelu") {
    const Operand above = node.emit(OpId::Greater, {x, node.scalar(dtype, f.alpha)});
    return node.emit(OpId::Where, {above, x, node.scalar(dtype, 0.0)});
  }
  if (f.name == "softsign") {
    const Operand denominator = node.emit(OpId::Add, {node.emit(OpId::Abs, {x}), node.scalar(dtype, 1.0)});
    return node.emit(OpId::Div, {x, denominator});
  }
  if (f.name == "affine")
    return node.emit(OpId::Add, {node.emit(OpId::Scale, {x}, {{"factor", f.alpha}}), node.scalar(dtype, f.beta)});
  // scaledtanh: alpha * tanh(beta * x)
  const Operand inner = node.emit(OpId::Tanh, {node.emit(OpId::Scale, {x}, {{"factor", f.beta}})});
  return node.emit(OpId::Scale, {inner}, {{"factor", f.alpha}});
}

void expect_shape(NodeContext& node, const Operand& operand, const ir::Shape& shape, const char* what) {
  if (operand.type().shape != shape)
    node.fail(std::string(what) + " has shape " + ir::shape_to_string(operand.type().shape) + ", expected " +
              ir::shape_to_string(shape));
}

// Everything one direction of the layer reads.
struct Layer {
  Cell cell = Cell::Rnn;
  int gates = 1;
  int64_t steps = 0, batch = 0, hidden = 0;
  std::optional<double> clip;
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM
  std::optional<Operand> sequence_lens;
};

struct DirectionResult {
  std::vector<Operand> y;  // one [batch, hidden] per time step (in time order)
  Operand h, c;            // final states
};

DirectionResult run_direction(NodeContext& node, const Layer& layer, const Operand& x2, int d, bool reverse,
                              const std::vector<Activation>& f) {
  const Operand& w_all = node.input(1);
  const Operand& r_all = node.input(2);
  const int64_t H = layer.hidden, B = layer.batch, T = layer.steps;
  const ir::DType dtype = x2.type().dtype;
  const Operand w = node.reshape(slice_axis(node, w_all, 0, d, d + 1), {layer.gates * H, w_all.type().shape[2]});
  const Operand r = node.reshape(slice_axis(node, r_all, 0, d, d + 1), {layer.gates * H, H});
  std::optional<Operand> bias;
  if (node.has_input(3)) bias = node.reshape(slice_axis(node, node.input(3), 0, d, d + 1), {2 * layer.gates * H});
  auto gate_rows = [&](const Operand& m, int g) { return slice_axis(node, m, 0, g * H, (g + 1) * H); };
  auto bias_part = [&](int g, bool recurrent) {
    const int64_t at = (recurrent ? layer.gates + g : g) * H;
    return slice_axis(node, *bias, 0, at, at + H);
  };

  // The input projection of every step, per gate: [T, B, H].
  const bool gru_reset_bias_apart = layer.cell == Cell::Gru && layer.linear_before_reset;
  std::vector<Operand> projected, recurrent;
  for (int g = 0; g < layer.gates; ++g) {
    Operand p = node.emit(OpId::Matmul, {x2, gate_rows(w, g)}, {{"transpose_b", true}});
    if (bias) {
      Operand b = bias_part(g, false);
      const bool recurrent_bias_inside = gru_reset_bias_apart && g == 2;
      if (!recurrent_bias_inside) b = node.emit(OpId::Add, {b, bias_part(g, true)});
      p = node.emit(OpId::Add, {p, b});
    }
    projected.push_back(node.reshape(p, {T, B, H}));
    recurrent.push_back(gate_rows(r, g));
  }
  std::optional<Operand> peephole[3];
  if (layer.cell == Cell::Lstm && node.has_input(7)) {
    const Operand p = node.reshape(slice_axis(node, node.input(7), 0, d, d + 1), {3 * H});
    for (int k = 0; k < 3; ++k) peephole[k] = slice_axis(node, p, 0, k * H, (k + 1) * H);
  }
  auto initial = [&](int index) {
    if (!node.has_input(index)) return node.fill(dtype, {B, H}, 0.0);
    return node.reshape(slice_axis(node, node.input(index), 0, d, d + 1), {B, H});
  };
  auto clipped = [&](const Operand& v) {
    return layer.clip ? node.emit(OpId::Clip, {v}, {{"min", -*layer.clip}, {"max", *layer.clip}}) : v;
  };

  DirectionResult out;
  out.y.resize(static_cast<size_t>(T));
  Operand h = initial(5);
  Operand c = layer.cell == Cell::Lstm ? initial(6) : Operand{};
  for (int64_t i = 0; i < T; ++i) {
    const int64_t t = reverse ? T - 1 - i : i;
    auto input_part = [&](int g) { return node.reshape(slice_axis(node, projected[g], 0, t, t + 1), {B, H}); };
    auto pre = [&](int g) {
      return node.emit(OpId::Add, {input_part(g), node.emit(OpId::Matmul, {h, recurrent[g]}, {{"transpose_b", true}})});
    };
    Operand h_new, c_new;
    if (layer.cell == Cell::Rnn) {
      h_new = activate(node, f[0], clipped(pre(0)));
    } else if (layer.cell == Cell::Gru) {
      const Operand z = activate(node, f[0], clipped(pre(0)));
      const Operand reset = activate(node, f[0], clipped(pre(1)));
      Operand candidate;
      if (layer.linear_before_reset) {
        Operand hr = node.emit(OpId::Matmul, {h, recurrent[2]}, {{"transpose_b", true}});
        if (bias) hr = node.emit(OpId::Add, {hr, bias_part(2, true)});
        candidate = node.emit(OpId::Add, {input_part(2), node.emit(OpId::Mul, {reset, hr})});
      } else {
        const Operand reset_h = node.emit(OpId::Mul, {reset, h});
        candidate = node.emit(OpId::Add, {input_part(2), node.emit(OpId::Matmul, {reset_h, recurrent[2]}, {{"transpose_b", true}})});
      }
      const Operand hh = activate(node, f[1], clipped(candidate));
      // (1 - z) * hh + z * h = hh + z * (h - hh)
      h_new = node.emit(OpId::Add, {hh, node.emit(OpId::Mul, {z, node.emit(OpId::Sub, {h, hh})})});
    } else {
      auto with_peephole = [&](Operand v, int k, const Operand& state) {
        return peephole[k] ? node.emit(OpId::Add, {v, node.emit(OpId::Mul, {*peephole[k], state})}) : v;
      };
      const Operand in = activate(node, f[0], clipped(with_peephole(pre(0), 0, c)));
      const Operand forget = layer.input_forget ? node.emit(OpId::Sub, {node.scalar(dtype, 1.0), in})
                                                : activate(node, f[0], clipped(with_peephole(pre(2), 2, c)));
      const Operand candidate = activate(node, f[1], clipped(pre(3)));
      c_new = node.emit(OpId::Add, {node.emit(OpId::Mul, {forget, c}), node.emit(OpId::Mul, {in, candidate})});
      const Operand o = activate(node, f[0], clipped(with_peephole(pre(1), 1, c_new)));
      h_new = node.emit(OpId::Mul, {o, activate(node, f[2], c_new)});
    }
    if (layer.sequence_lens) {
      const Operand lens = *layer.sequence_lens;
      const Operand live = node.reshape(
          node.emit(OpId::Less, {node.scalar(lens.type().dtype, static_cast<double>(t)), lens}), {B, 1});
      out.y[static_cast<size_t>(t)] = node.emit(OpId::Where, {live, h_new, node.scalar(dtype, 0.0)});
      h = node.emit(OpId::Where, {live, h_new, h});
      if (layer.cell == Cell::Lstm) c = node.emit(OpId::Where, {live, c_new, c});
    } else {
      out.y[static_cast<size_t>(t)] = h = h_new;
      c = c_new;
    }
  }
  out.h = h;
  out.c = c;
  return out;
}

Operand concat(NodeContext& node, const std::vector<Operand>& parts, int axis) {
  return parts.size() == 1 ? parts[0] : node.emit(OpId::Concat, parts, {{"axis", int64_t{axis}}});
}

Outputs recurrent_layer(NodeContext& node, Cell cell) {
  std::vector<std::string> known{"activation_alpha", "activation_beta", "activations", "clip", "direction",
                                 "hidden_size"};
  if (node.opset() >= 14) known.push_back("layout");
  if (cell == Cell::Gru) known.push_back("linear_before_reset");
  if (cell == Cell::Lstm) known.push_back("input_forget");
  node.check_attrs(known);
  const int gates = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;

  Operand x = node.input(0);
  if (!ir::is_floating(x.type().dtype)) node.fail("X must be floating point");
  // A constant sequence would fold every step at import, T chained matmuls on the reference
  // evaluator; as a parameter it is computed at run time like any other.
  if (x.is_constant()) {
    Operand parameter;
    parameter.value = node.builder().materialize(x);
    x = parameter;
  }
  if (x.type().rank() != 3) node.fail("X must have rank 3, not " + std::to_string(x.type().rank()));
  const bool batch_first = node.attr_int("layout", 0) != 0;
  if (batch_first) x = node.emit(OpId::Transpose, {x}, {{"perm", Ints{1, 0, 2}}});
  const int64_t T = x.type().shape[0], B = x.type().shape[1], I = x.type().shape[2];
  if (T == 0 || B == 0) node.fail("an empty sequence or batch is not supported");

  const std::string direction = node.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    node.fail("direction '" + direction + "' is not forward, reverse or bidirectional");
  const int D = direction == "bidirectional" ? 2 : 1;
  const int64_t per_step = kNodesPerStep[static_cast<int>(cell)] + (node.has_input(4) ? 8 : 0);
  if (T > kMaxUnrolledNodes / (per_step * D))
    node.fail("a sequence of " + std::to_string(T) + " steps would unroll to about " + std::to_string(T * per_step * D) +
              " nodes, over the " + std::to_string(kMaxUnrolledNodes) +
              " kiln builds for one recurrent layer (a loop op is later work)");
  const Operand& r = node.input(2);
  if (r.type().rank() != 3) node.fail("R must have rank 3");
  const int64_t H = node.has_attr("hidden_size") ? node.attr_int("hidden_size", 0) : r.type().shape[2];
  if (H <= 0 || H > (int64_t{1} << 24)) node.fail("hidden_size must be positive");
  expect_shape(node, node.input(1), {D, gates * H, I}, "W");
  expect_shape(node, r, {D, gates * H, H}, "R");
  if (node.has_input(3)) expect_shape(node, node.input(3), {D, 2 * gates * H}, "B");
  if (node.has_input(5)) expect_shape(node, node.input(5), {D, B, H}, "initial_h");
  if (cell == Cell::Lstm && node.has_input(6)) expect_shape(node, node.input(6), {D, B, H}, "initial_c");
  if (cell == Cell::Lstm && node.has_input(7)) expect_shape(node, node.input(7), {D, 3 * H}, "P");
  for (int i = 1; i < node.num_inputs(); ++i)
    if (node.has_input(i) && i != 4 && node.input(i).type().dtype != x.type().dtype)
      node.fail("input " + std::to_string(i) + " must have X's element type");

  Layer layer;
  layer.cell = cell;
  layer.gates = gates;
  layer.steps = T;
  layer.batch = B;
  layer.hidden = H;
  if (node.has_attr("clip")) layer.clip = node.attr_float("clip", 0.0);
  layer.linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  layer.input_forget = node.attr_int("input_forget", 0) != 0;
  if (node.has_input(4)) {
    const Operand& lens = node.input(4);
    expect_shape(node, lens, {B}, "sequence_lens");
    if (!ir::is_integer(lens.type().dtype)) node.fail("sequence_lens must be an integer tensor");
    bool all_full = lens.is_constant();
    if (lens.is_constant())
      for (int64_t length : tensor_ints(*lens.constant)) {
        if (length < 0 || length > T)
          node.fail("sequence_lens holds " + std::to_string(length) + ", outside [0, " + std::to_string(T) + "]");
        all_full = all_full && length == T;
      }
    if (!all_full) layer.sequence_lens = lens;
  }

  const std::vector<Activation> f = activations(node, cell, D);
  const size_t per_direction = f.size() / static_cast<size_t>(D);
  const Operand x2 = node.reshape(x, {T * B, I});
  std::vector<Operand> y_parts, h_parts, c_parts;
  for (int d = 0; d < D; ++d) {
    const std::vector<Activation> fd(f.begin() + d * per_direction, f.begin() + (d + 1) * per_direction);
    DirectionResult result = run_direction(node, layer, x2, d, direction == "reverse" || d == 1, fd);
    if (node.output_used(0)) {
      std::vector<Operand> steps;
      for (const Operand& y : result.y) steps.push_back(node.reshape(y, {1, 1, B, H}));
      y_parts.push_back(concat(node, steps, 0));
    }
    h_parts.push_back(node.reshape(result.h, {1, B, H}));
    if (cell == Cell::Lstm) c_parts.push_back(node.reshape(result.c, {1, B, H}));
  }
  Outputs outputs(static_cast<size_t>(node.num_outputs()));
  auto batch_major = [&](const Operand& v, Ints perm) {
    return batch_first ? node.emit(OpId::Transpose, {v}, {{"perm", perm}}) : v;
  };
  if (!outputs.empty() && node.output_used(0)) outputs[0] = batch_major(concat(node, y_parts, 1), {2, 0, 1, 3});
  if (outputs.size() > 1) outputs[1] = batch_major(concat(node, h_parts, 0), {1, 0, 2});
  if (outputs.size() > 2) {
    if (cell != Cell::Lstm) node.fail("this layer has two outputs");
    outputs[2] = batch_major(concat(node, c_parts, 0), {1, 0, 2});
  }
  return outputs;
}

Outputs rnn(NodeContext& node) { return recurrent_layer(node, Cell::Rnn); }
Outputs gru(NodeContext& node) { return recurrent_layer(node, Cell::Gru); }
Outputs lstm(NodeContext& node) { return recurrent_layer(node, Cell::Lstm); }

constexpr int kLast = kMaxOpset;
constexpr OpRule kRules[] = {
    {"RNN", 7, kLast, rnn},
    {"GRU", 7, kLast, gru},
    {"LSTM", 7, kLast, lstm},
};

}  // namespace

std::span<const OpRule> recurrent_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
