// Parameter initializers: checking specs and drawing tensors.
//
// Random kinds read the Philox 4x32-10 stream (ir/philox.h) at (seed, offset 0). Element i
// depends only on its own words (word i for uniforms; words 2i and 2i+1 for normals), so a CUDA
// kernel can draw any element independently and match the host bit for bit up to the final
// float rounding. Normals use the Box-Muller transform (Box & Muller, "A note on the generation
// of random normal deviates", 1958) keeping only the cosine branch for that reason:
//   u1 in (0, 1], u2 in [0, 1):  z = sqrt(-2 ln u1) * cos(2 pi u2)  ~  N(0, 1).
#include "ir/initializer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "ir/parallel.h"
#include "ir/philox.h"

namespace kiln::ir {
namespace {

struct KindDef {
  std::string name;
  std::vector<AttrSpec> args;  // AttrSpec::default_value nullopt: required
  bool random = false;         // draws from Philox, so it needs a float dtype
  bool uses_fans = false;      // scale from fan-in/fan-out, so it needs rank >= 1
};

const std::vector<KindDef>& kind_defs() {
  static const AttrSpec seed{"seed", AttrType::Int, int64_t{0}};
  static const std::vector<KindDef> defs = {
      {"zeros", {}},
      {"ones", {}},
      {"constant", {{"value", AttrType::Float, std::nullopt}}},
      {"uniform", {{"low", AttrType::Float, -1.0}, {"high", AttrType::Float, 1.0}, seed}, true},
      {"normal", {{"mean", AttrType::Float, 0.0}, {"std", AttrType::Float, 1.0}, seed}, true},
      {"glorot_uniform", {seed}, true, true},
      {"he_normal", {seed}, true, true},
  };
  return defs;
}

const KindDef* find_kind(std::string_view name) {
  for (const KindDef& def : kind_defs())
    if (def.name == name) return &def;
  return nullptr;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

// Reads a normalized argument; a missing or ill-typed one means normalization did not run.
double float_arg(const InitializerSpec& spec, const std::string& name) {
  auto it = spec.args.find(name);
  KILN_CHECK(it != spec.args.end() && std::holds_alternative<double>(it->second))
      << "initializer '" << spec.kind << "' argument '" << name << "' not normalized";
  return std::get<double>(it->second);
}

int64_t int_arg(const InitializerSpec& spec, const std::string& name) {
  auto it = spec.args.find(name);
  KILN_CHECK(it != spec.args.end() && std::holds_alternative<int64_t>(it->second))
      << "initializer '" << spec.kind << "' argument '" << name << "' not normalized";
  return std::get<int64_t>(it->second);
}

// Coerces each given argument to its type and fills in the defaults.
void check_arg_types(InitializerSpec& spec, const KindDef& def) {
  for (const AttrSpec& arg : def.args) {
    auto it = spec.args.find(arg.name);
    if (it == spec.args.end()) {
      if (!arg.default_value)
        throw OpError{"initializer '" + spec.kind + "' needs argument '" + arg.name + "'", -1,
                      arg.name};
      spec.args.emplace(arg.name, *arg.default_value);
      continue;
    }
    const Attribute& given = it->second;
    if (arg.name == "seed") {
      const int64_t* seed = std::get_if<int64_t>(&given);
      if (seed == nullptr || *seed < 0) {
        const std::string what = seed != nullptr ? attribute_to_string(given)
                                                 : "a " + std::string(attr_type_name(
                                                              attr_type_of(given))) +
                                                       " (" + attribute_to_string(given) + ")";
        throw OpError{"argument 'seed' must be a non-negative int, got " + what, -1, "seed"};
      }
      continue;
    }
    std::optional<Attribute> coerced = coerce_attribute(given, arg.type);
    if (!coerced)
      throw OpError{"argument '" + arg.name + "' must be a " +
                        std::string(attr_type_name(arg.type)) + ", got a " +
                        std::string(attr_type_name(attr_type_of(given))) + " (" +
                        attribute_to_string(given) + ")",
                    -1, arg.name};
    it->second = std::move(*coerced);
  }
}

// The value ranges: random kinds need finite parameters, a non-empty interval, std >= 0.
void check_arg_values(const InitializerSpec& spec, const KindDef& def) {
  if (def.random) {
    for (const AttrSpec& arg : def.args) {
      if (arg.type != AttrType::Float) continue;
      const double value = float_arg(spec, arg.name);
      if (!std::isfinite(value))
        throw OpError{"argument '" + arg.name + "' (" + float_to_string(value) +
                          ") must be finite",
                      -1, arg.name};
    }
  }
  if (spec.kind == "uniform" && float_arg(spec, "low") > float_arg(spec, "high"))
    throw OpError{"argument 'low' (" + float_to_string(float_arg(spec, "low")) +
                      ") is greater than 'high' (" + float_to_string(float_arg(spec, "high")) +
                      ")",
                  -1, "low"};
  if (spec.kind == "normal" && float_arg(spec, "std") < 0)
    throw OpError{"argument 'std' (" + float_to_string(float_arg(spec, "std")) +
                      ") must not be negative",
                  -1, "std"};
}

// Whether the parameter's dtype can hold what the kind produces.
void check_dtype(const InitializerSpec& spec, const KindDef& def, const TensorType& type) {
  if (def.random && !is_floating(type.dtype))
    throw OpError{"initializer '" + spec.kind + "' needs a float parameter, not " +
                      type.to_string(),
                  -1, ""};
  if (def.uses_fans && type.rank() == 0)
    throw OpError{"initializer '" + spec.kind +
                  "' scales by fan-in, which a scalar parameter does not have (" +
                      type.to_string() + ")",
                  -1, ""};
  if (spec.kind != "constant" || is_floating(type.dtype)) return;
  // A constant must be exactly representable, rather than silently truncated.
  const double value = float_arg(spec, "value");
  const std::string shown = "argument 'value' (" + float_to_string(value) + ")";
  if (type.dtype == DType::Bool) {
    if (value != 0 && value != 1)
      throw OpError{shown + " must be 0 or 1 for a bool parameter", -1, "value"};
    return;
  }
  const double limit = type.dtype == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
  if (value != std::trunc(value) || value < -limit || value >= limit)
    throw OpError{shown + " is not representable in the parameter's type " + type.to_string(),
                  -1, "value"};
}

// PyTorch's fan computation (torch.nn.init._calculate_fan_in_and_fan_out), extended to rank 1.
std::pair<double, double> fan_in_and_out(const Shape& shape) {
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  double receptive_field = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive_field *= double(shape[i]);
  return {double(shape[1]) * receptive_field, double(shape[0]) * receptive_field};
}

// The Philox stream at offset 0, one block computed per four consecutive words.
class PhiloxWords {
 public:
  explicit PhiloxWords(uint64_t seed) : seed_(seed) {}
  uint32_t operator[](uint64_t i) {
    const uint64_t block = i / 4;
    if (!have_block_ || block != block_index_) {
      // Same counter layout as philox::random_u32 (a test checks they agree).
      block_ = philox::philox4x32_10(
          philox::Block{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, seed_);
      block_index_ = block;
      have_block_ = true;
    }
    return block_.v[i % 4];
  }

 private:
  uint64_t seed_;
  uint64_t block_index_ = 0;
  bool have_block_ = false;
  philox::Block block_{};
};

// Runs fill(begin, end, words) over [0, count) in pieces on every core: element i depends on
// its own Philox words only, so the result is the same as one pass in order (each piece has
// its own word reader). Small tensors stay on the calling thread.
void parallel_fill(int64_t count, uint64_t seed,
                   const std::function<void(int64_t, int64_t, PhiloxWords&)>& fill) {
  const Pieces pieces = pieces_per_core(count, int64_t{1} << 16);
  run_pieces(pieces, [&](int64_t piece) {
    PhiloxWords words(seed);
    fill(pieces.begin(piece), pieces.end(piece), words);
  });
}

double box_muller(uint32_t first, uint32_t second) {
  const double u1 = 1.0 - double(philox::uniform_from_u32(first));  // (0, 1]: log is finite
  const double u2 = double(philox::uniform_from_u32(second));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

const std::vector<std::string>& initializer_kinds() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const KindDef& def : kind_defs()) out.push_back(def.name);
    return out;
  }();
  return names;
}

void normalize_initializer(InitializerSpec& spec, const TensorType& type) {
  const KindDef* def = find_kind(spec.kind);
  if (def == nullptr) {
    std::string message = "unknown initializer '" + spec.kind + "'";
    if (auto hint = closest_name(spec.kind, initializer_kinds()))
      message += "; did you mean '" + *hint + "'?";
    else
      message += "; kiln has " + join_names(initializer_kinds());
    throw OpError{message, -1, ""};
  }
  std::vector<std::string> known;
  for (const AttrSpec& arg : def->args) known.push_back(arg.name);
  for (const auto& [name, value] : spec.args) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string message = "initializer '" + spec.kind + "' has no argument '" + name + "'";
    if (auto hint = closest_name(name, known))
      message += "; did you mean '" + *hint + "'?";
    else if (known.empty())
      message += "; it takes no arguments";
    else
      message += "; it takes " + join_names(known);
    throw OpError{message, -1, name};
  }
  check_arg_types(spec, *def);
  check_arg_values(spec, *def);
  check_dtype(spec, *def, type);
}

Tensor materialize_initializer(const InitializerSpec& spec, const TensorType& type) {
  Tensor tensor(type);
  const int64_t count = tensor.num_elements();
  if (spec.kind == "zeros") return tensor;
  if (spec.kind == "ones" || spec.kind == "constant") {
    const double value = spec.kind == "ones" ? 1.0 : float_arg(spec, "value");
    for (int64_t i = 0; i < count; ++i) tensor.set(i, value);
    return tensor;
  }

  const uint64_t seed = static_cast<uint64_t>(int_arg(spec, "seed"));
  if (spec.kind == "uniform" || spec.kind == "glorot_uniform") {
    double low, high;
    if (spec.kind == "uniform") {
      low = float_arg(spec, "low");
      high = float_arg(spec, "high");
    } else {
      const auto [fan_in, fan_out] = fan_in_and_out(type.shape);
      high = std::sqrt(6.0 / (fan_in + fan_out));
      low = -high;
    }
    parallel_fill(count, seed, [&](int64_t begin, int64_t end, PhiloxWords& words) {
      for (int64_t i = begin; i < end; ++i)
        tensor.set(i, low + (high - low) * double(philox::uniform_from_u32(words[i])));
    });
    return tensor;
  }

  KILN_CHECK(spec.kind == "normal" || spec.kind == "he_normal")
      << "unknown initializer '" << spec.kind << "' not normalized";
  double mean = 0, std_dev;
  if (spec.kind == "normal") {
    mean = float_arg(spec, "mean");
    std_dev = float_arg(spec, "std");
  } else {
    std_dev = std::sqrt(2.0 / fan_in_and_out(type.shape).first);
  }
  parallel_fill(count, seed, [&](int64_t begin, int64_t end, PhiloxWords& words) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t first = 2 * static_cast<uint64_t>(i);
      tensor.set(i, mean + std_dev * box_muller(words[first], words[first + 1]));
    }
  });
  return tensor;
}

}  // namespace kiln::ir
