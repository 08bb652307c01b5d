// sparsify-two-four: a conv2d or dense whose weight keeps at most 2 of every 4 consecutive values
// along its rows (`kiln train --prune-pattern=2:4`) reads it compressed. Those rows are the
// GEMM's dot products (K) for both: [O][C/groups * KH * KW] and [N][K]. So are the columns of a
// matmul's 2-D B [K][N] (PyTorch exports a Linear on 3-D inputs as MatMul by the transposed
// weight): such a matmul becomes a dense of B^T, compressed. The weight, a 16-bit parameter
// with data, is replaced by its kept values and their positions (two new parameters, the form of
// ir/two_four.h: 56 % of the weight's bytes) and an expand_2_4 of them standing for the dense
// weight. fuse-conv-bias-relu takes the expand_2_4 into the conv's or dense's kernel, whose GEMM
// then runs on sparse tensor cores (mma.sp m16n8k32: twice the dense rate on Ampere and Hopper;
// a dense as its transpose, weight * x^T, since mma.sp takes A compressed) and never stores the
// dense weight; the old parameter, unread, goes at dce.
//
// The inference pipelines with --precision=bf16 or f16 run it right after autocast's weights
// became 16-bit parameters (constant-fold). Vendor libraries read dense weights: with the option
// library=conv2d (cuDNN takes the convolutions) or library=dense (cuBLASLt the dense layers and
// matmuls), passes::keep_vendor_gemms_whole leaves those layers' weights dense, and drops the
// pass when the libraries take both. The results are the same products as the dense kernel's,
// summed once per 32 k rather than per 16. Refused, each with its reason under
// --debug-only=sparsify-two-four: a weight without data or read by anything but these layers, an
// f32 weight (the sparse units multiply 16-bit operands), rows that are not whole k steps of
// 32 (one mma.sp's), and weights that break the pattern (the first group that does is named).
#include <fmt/format.h>

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/two_four.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "sparsify-two-four";

// The k of one sparse tensor-core step: a compressed row must hold whole steps.
constexpr int64_t kSparseStepK = 32;

struct Compressed {
  ir::Value* kept = nullptr;
  ir::Value* positions = nullptr;
};

// Whether `node` multiplies by its weight (input 1) stored [K, N]: a matmul without
// transpose_b, whose dense rows are the weight's columns.
bool weight_transposed(const ir::Node& node) {
  return node.op == ir::OpId::Matmul && !std::get<bool>(node.attrs.at("transpose_b"));
}

// Why `weight` cannot be read compressed; nullopt when it can, with `out` filled (its rows: the
// weight's, or its columns when `transposed`).
std::optional<std::string> refusal(const ir::Value* weight, bool transposed, int64_t readers, int64_t layer_readers,
                                   ir::TwoFourMatrix* out) {
  if (weight->role != ir::ValueRole::Parameter || !weight->data)
    return "it is not a parameter with data (sparsity is known only for weights given at compile time)";
  if (readers != layer_readers) return "it is read by other ops too: the dense weight would be stored as well";
  const ir::DType dtype = weight->type.dtype;
  if (dtype != ir::DType::BF16 && dtype != ir::DType::F16)
    return fmt::format("it is {}: sparse tensor cores multiply bf16 or f16 operands (--precision=bf16|f16)",
                       ir::dtype_name(dtype));
  const int64_t rows = transposed ? weight->type.shape[1] : weight->type.shape[0];
  const int64_t k = ir::num_elements(weight->type.shape) / rows;
  if (k % kSparseStepK != 0)
    return fmt::format("its {} hold {} values, not a whole number of mma.sp steps of {}",
                       transposed ? "columns" : "rows", k, kSparseStepK);
  const std::vector<double> values = weight->data->to_doubles();
  std::vector<float> dense(values.size());  // row-major [rows][k]
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < k; ++i)
      dense[static_cast<size_t>(row * k + i)] =
          static_cast<float>(values[static_cast<size_t>(transposed ? i * rows + row : row * k + i)]);
  if (std::string broken = ir::compress_two_four(dense.data(), rows, k, out); !broken.empty())
    return "it is not 2:4 sparse: " + broken;
  return std::nullopt;
}

// The layers that read their weight (input 1) as the rows of a GEMM's dot products: conv2d,
// dense, and a matmul of rows by one matrix (what PyTorch exports a Linear on 3-D inputs as:
// MatMul by the weight transposed), which becomes a dense when its weight is compressed.
bool reads_weight_rows(const ir::Node& node) {
  if (node.is_kernel()) return false;
  if (node.op == ir::OpId::Matmul)
    return !std::get<bool>(node.attrs.at("transpose_a")) && std::get<int64_t>(node.attrs.at("k_chunk")) == 0 &&
           node.inputs[1]->type.rank() == 2 && node.inputs[0]->type.rank() >= 2;
  return node.op == ir::OpId::Conv2d || node.op == ir::OpId::Dense;
}

// The layer op option library= names (a vendor library computes it from dense weights), or
// nullopt for none.
std::optional<ir::OpId> library_layers(const PassContext& context) {
  context.check_options(kPass, {"library"});
  const std::string library = context.option("library", "none");
  if (library == "none") return std::nullopt;
  if (library == "conv2d") return ir::OpId::Conv2d;
  if (library == "dense") return ir::OpId::Dense;  // and the matmuls that would become dense
  throw Error("--passes", fmt::format("pass '{}': option library={}: expected conv2d, dense or none (the "
                                      "layers a vendor library computes from dense weights)",
                                      kPass, library));
}

}  // namespace

bool SparsifyTwoFour::run(ir::Graph& graph, PassContext& context) {
  std::unordered_map<const ir::Value*, int64_t> readers, layer_readers;
  for (const auto& node : graph.nodes())
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      ++readers[node->inputs[i]];
      if (reads_weight_rows(*node) && i == 1) ++layer_readers[node->inputs[i]];
    }
  for (const ir::Value* output : graph.outputs) ++readers[output];

  const std::optional<ir::OpId> library = library_layers(context);
  std::vector<ir::Node*> layers;
  for (const auto& node : graph.nodes()) {
    if (!reads_weight_rows(*node)) continue;
    if (node->op == library || (library == ir::OpId::Dense && node->op == ir::OpId::Matmul)) {
      context.debug(kPass, fmt::format("not sparsifying the weight %{} of {}: a vendor library computes {} "
                                       "layers (option library), from dense weights",
                                       node->inputs[1]->name, node->describe(), ir::to_string(node->op)));
      continue;
    }
    layers.push_back(node.get());
  }

  NameTable names(graph);
  // Each weight once, as its rows and (a matmul's) as its columns.
  std::map<std::pair<const ir::Value*, bool>, Compressed> compressed;
  std::map<std::pair<const ir::Value*, bool>, std::string> refused;
  Replacements replacements;  // a matmul's result -> its dense's
  std::unordered_set<const ir::Node*> dead;
  bool changed = false;
  for (ir::Node* layer : layers) {
    ir::Value* weight = layer->inputs[1];
    const bool transposed = weight_transposed(*layer);
    const std::pair<const ir::Value*, bool> key{weight, transposed};
    const std::string base = weight->name + (transposed ? ".t" : "");  // the new values' names
    if (auto why = refused.find(key); why != refused.end()) {
      context.debug(kPass, fmt::format("not sparsifying the weight %{} of {}: {}", weight->name, layer->describe(),
                                       why->second));
      continue;
    }
    auto found = compressed.find(key);
    if (found == compressed.end()) {
      ir::TwoFourMatrix matrix;
      if (auto why = refusal(weight, transposed, readers[weight], layer_readers[weight], &matrix)) {
        refused.emplace(key, *why);
        context.debug(kPass, fmt::format("not sparsifying the weight %{} of {}: {}", weight->name,
                                         layer->describe(), *why));
        continue;
      }
      if (!context.take_fuel(kPass, fmt::format("sparsify %{} of {}", weight->name, layer->describe()))) break;
      const ir::TensorType kept_type{weight->type.dtype, {matrix.rows, matrix.k / 2}};
      const ir::TensorType positions_type{ir::DType::U16, {matrix.rows, matrix.words_per_row()}};
      std::vector<double> kept(matrix.values.begin(), matrix.values.end());
      std::vector<double> positions(matrix.metadata.begin(), matrix.metadata.end());
      Compressed c;
      c.kept = graph.add_parameter(names.take(base + ".kept"), kept_type, ir::InlineData{kept}, weight->loc);
      c.kept->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(kept_type, kept));
      c.positions = graph.add_parameter(names.take(base + ".positions"), positions_type,
                                        ir::InlineData{positions}, weight->loc);
      c.positions->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(positions_type, positions));
      found = compressed.emplace(key, c).first;
      context.debug(kPass, fmt::format("%{} {} -> %{} {} and %{} {}", weight->name, weight->type.to_string(),
                                       c.kept->name, kept_type.to_string(), c.positions->name,
                                       positions_type.to_string()));
    }
    NodeInserter inserter(graph, names, *layer);
    const ir::Value* kept = found->second.kept;
    const ir::Shape dense_shape{kept->type.shape[0], kept->type.shape[1] * 2};
    ir::Value* expanded = inserter.add(ir::OpId::ExpandTwoFour, {found->second.kept, found->second.positions},
                                       {{"shape", layer->op == ir::OpId::Conv2d ? weight->type.shape : dense_shape}},
                                       base + ".expanded");
    changed = true;
    if (layer->op != ir::OpId::Matmul) {
      layer->inputs[1] = expanded;
      continue;
    }
    // A matmul of rows by a 2:4 matrix is a dense layer of its (transposed) weight: the GEMM
    // that runs it on sparse tensor cores. Its result keeps its name.
    ir::Value* old_result = layer->results[0];
    const std::string result_name = old_result->name;
    old_result->name = names.take(result_name + ".matmul");
    names.release(result_name);
    ir::Value* result = inserter.add(ir::OpId::Dense, {layer->inputs[0], expanded}, {{"k_chunk", int64_t{0}}},
                                     result_name);
    context.debug(kPass, fmt::format("{} (%{}) becomes a dense of the compressed %{}", layer->describe(), result_name,
                                     found->second.kept->name));
    replacements[old_result] = result;
    dead.insert(layer);
  }
  replace_and_erase(graph, replacements, dead);
  return changed;
}

}  // namespace kiln::passes
