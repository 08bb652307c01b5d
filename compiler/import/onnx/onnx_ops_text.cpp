// ONNX text-feature ops → kiln ops: TfIdfVectorizer over integer tokens, as equality tests of
// shifted slices against the pool (one comparison per n-gram position and skip), summed.
#include <algorithm>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

// More shifted comparisons than this (n-gram lengths × skips × tokens per n-gram) is a
// vectorizer no model needs, and would unroll into a graph nobody wants to compile.
constexpr int64_t kMaxComparisons = 4096;

enum class Weighting { kTf, kIdf, kTfIdf };

// The pool's n-grams of one length: their tokens (column j holds every n-gram's j-th token) and
// where each lands in the output.
struct NgramGroup {
  int64_t length = 0;
  std::vector<Ints> tokens;     // [length][count]
  Ints output_index;            // [count]
  std::vector<double> weights;  // [count]
};

// Splits pool_int64s by ngram_counts (the pool offset where each length's n-grams start).
std::vector<NgramGroup> read_pool(NodeContext& node) {
  if (node.has_attr("pool_strings")) node.fail("pool_strings: string tokens are out of scope (kiln has no strings)");
  const Ints pool = node.attr_ints("pool_int64s");
  const Ints starts = node.attr_ints("ngram_counts");
  const Ints indexes = node.attr_ints("ngram_indexes");
  const std::vector<double> weights = node.attr_floats("weights");
  if (pool.empty()) node.fail("pool_int64s is required and must not be empty");
  if (starts.empty()) node.fail("ngram_counts is required");
  std::vector<NgramGroup> groups;
  size_t ngram = 0;
  for (size_t g = 0; g < starts.size(); ++g) {
    const int64_t begin = starts[g];
    const int64_t end = g + 1 < starts.size() ? starts[g + 1] : static_cast<int64_t>(pool.size());
    const int64_t length = static_cast<int64_t>(g) + 1;
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size()))
      node.fail("ngram_counts must be non-decreasing offsets into pool_int64s (size " +
                std::to_string(pool.size()) + "), got " + std::to_string(begin) + " then " + std::to_string(end));
    if ((end - begin) % length != 0)
      node.fail("pool_int64s[" + std::to_string(begin) + ":" + std::to_string(end) + "] does not split into " +
                std::to_string(length) + "-grams");
    NgramGroup group;
    group.length = length;
    group.tokens.resize(static_cast<size_t>(length));
    for (int64_t at = begin; at < end; at += length, ++ngram) {
      if (ngram >= indexes.size())
        node.fail("ngram_indexes has " + std::to_string(indexes.size()) + " entries, fewer than the pool's n-grams");
      if (indexes[ngram] < 0 || indexes[ngram] >= (int64_t{1} << 31))
        node.fail("ngram_indexes[" + std::to_string(ngram) + "] = " + std::to_string(indexes[ngram]) +
                  " lies outside [0, 2^31)");
      for (int64_t j = 0; j < length; ++j) group.tokens[static_cast<size_t>(j)].push_back(pool[static_cast<size_t>(at + j)]);
      group.output_index.push_back(indexes[ngram]);
      group.weights.push_back(weights.empty() ? 1.0 : ngram < weights.size() ? weights[ngram] : 0.0);
    }
    groups.push_back(std::move(group));
  }
  if (ngram != indexes.size())
    node.fail("ngram_indexes has " + std::to_string(indexes.size()) + " entries, the pool " + std::to_string(ngram) + " n-grams");
  if (!weights.empty() && weights.size() != ngram)
    node.fail("weights has " + std::to_string(weights.size()) + " entries, the pool " + std::to_string(ngram) + " n-grams");
  return groups;
}

// How often each n-gram of `group` occurs in each row of `tokens` ([rows, columns], i64): at
// every start position and, for n-grams longer than one token, with 0..max_skip tokens skipped
// between consecutive ones (a unigram counts once, whatever the skip). Result [rows, count], f32.
Operand count_ngrams(NodeContext& node, const Operand& tokens, const NgramGroup& group, int64_t max_skip,
                     int64_t& comparisons) {
  const int64_t rows = tokens.type().shape[0], columns = tokens.type().shape[1];
  const int64_t count = static_cast<int64_t>(group.output_index.size());
  Operand total;
  for (int64_t skip = 0; skip <= (group.length == 1 ? 0 : max_skip); ++skip) {
    const int64_t stride = skip + 1;
    const int64_t starts = columns - (group.length - 1) * stride;  // positions where the n-gram fits
    if (starts < 1) break;
    comparisons += group.length;
    if (comparisons > kMaxComparisons)
      node.fail("counting these n-grams takes over " + std::to_string(kMaxComparisons) +
                " shifted comparisons (max_skip_count " + std::to_string(max_skip) + " over " +
                std::to_string(columns) + " tokens); kiln unrolls them at import");
    Operand match;
    for (int64_t j = 0; j < group.length; ++j) {
      const int64_t from = j * stride;
      const Operand shifted = node.reshape(
          node.emit(OpId::Slice, {tokens}, {{"starts", Ints{from}}, {"ends", Ints{from + starts}}, {"axes", Ints{1}}, {"steps", Ints{1}}}),
          {rows, starts, 1});
      std::vector<double> wanted(group.tokens[static_cast<size_t>(j)].begin(), group.tokens[static_cast<size_t>(j)].end());
      const Operand pool = node.constant(ir::Tensor::from_doubles({ir::DType::I64, {1, 1, count}}, wanted), "pool");
      const Operand equal = node.emit(OpId::Equal, {shifted, pool});
      match = j == 0 ? equal : node.emit(OpId::LogicalAnd, {match, equal});
    }
    const Operand found = node.emit(OpId::ReduceSum, {node.emit(OpId::Cast, {match}, {{"to", std::string("f32")}})},
                                    {{"axes", Ints{1}}, {"keepdims", false}});
    total = total.present() ? node.emit(OpId::Add, {total, found}) : found;
  }
  return total;
}

// TfIdfVectorizer: per row of integer tokens, the (weighted) frequency of each pool n-gram whose
// length lies in [min_gram_length, max_gram_length], at its ngram_indexes position.
Outputs tfidf_vectorizer(NodeContext& node) {
  node.check_attrs({"max_gram_length", "max_skip_count", "min_gram_length", "mode", "ngram_counts", "ngram_indexes",
                    "pool_int64s", "pool_strings", "weights"});
  const Operand& x = node.input(0);
  const ir::TensorType& type = x.type();
  if (type.dtype != ir::DType::I32 && type.dtype != ir::DType::I64)
    node.fail("tokens must be int32 or int64, got " + type.to_string());
  if (type.rank() != 1 && type.rank() != 2) node.fail("tokens must be [C] or [N, C], got " + type.to_string());
  const int64_t min_length = node.attr_int("min_gram_length", 0), max_length = node.attr_int("max_gram_length", 0);
  const int64_t max_skip = node.attr_int("max_skip_count", 0);
  if (min_length < 1 || max_length < min_length)
    node.fail("min_gram_length and max_gram_length must satisfy 1 <= min <= max, got " + std::to_string(min_length) +
              " and " + std::to_string(max_length));
  if (max_skip < 0) node.fail("max_skip_count must be >= 0, got " + std::to_string(max_skip));
  const std::string mode = node.attr_string("mode", "");
  Weighting weighting;
  if (mode == "TF") weighting = Weighting::kTf;
  else if (mode == "IDF") weighting = Weighting::kIdf;
  else if (mode == "TFIDF") weighting = Weighting::kTfIdf;
  else node.fail("mode must be TF, IDF or TFIDF, got '" + mode + "'");
  const std::vector<NgramGroup> groups = read_pool(node);

  int64_t width = 0;
  for (const NgramGroup& group : groups)
    for (int64_t index : group.output_index) width = std::max(width, index + 1);
  const int64_t rows = type.rank() == 2 ? type.shape[0] : 1;
  Operand tokens = node.reshape(x, {rows, type.shape.back()});
  if (type.dtype != ir::DType::I64) tokens = node.emit(OpId::Cast, {tokens}, {{"to", std::string("i64")}});

  Operand result;
  int64_t comparisons = 0;
  for (const NgramGroup& group : groups) {
    const int64_t count = static_cast<int64_t>(group.output_index.size());
    if (group.length < min_length || group.length > max_length || count == 0) continue;
    Operand frequency = count_ngrams(node, tokens, group, max_skip, comparisons);
    if (!frequency.present()) continue;  // rows shorter than the n-gram
    if (weighting == Weighting::kIdf)
      frequency = node.emit(OpId::Cast, {node.emit(OpId::Greater, {frequency, node.scalar(ir::DType::F32, 0.0)})},
                            {{"to", std::string("f32")}});
    if (weighting != Weighting::kTf)
      frequency = node.emit(OpId::Mul, {frequency, node.constant(ir::Tensor::from_doubles({ir::DType::F32, {count}}, group.weights), "weights")});
    // Scatter the pool's n-grams to their output positions: a [count, width] one-hot product.
    node.check_fold_size({ir::DType::F32, {count, width}}, "the n-gram placement matrix");
    std::vector<double> placement(static_cast<size_t>(count * width), 0.0);
    for (int64_t p = 0; p < count; ++p) placement[static_cast<size_t>(p * width + group.output_index[static_cast<size_t>(p)])] = 1.0;
    const Operand placed = node.emit(
        OpId::Matmul, {frequency, node.constant(ir::Tensor::from_doubles({ir::DType::F32, {count, width}}, placement), "placement")});
    result = result.present() ? node.emit(OpId::Add, {result, placed}) : placed;
  }
  if (!result.present()) result = node.fill(ir::DType::F32, {rows, width}, 0.0);
  if (type.rank() == 1) result = node.reshape(result, {width});
  return {result};
}

constexpr OpRule kRules[] = {
    {"TfIdfVectorizer", 9, kMaxOpset, tfidf_vectorizer},
};

}  // namespace

std::span<const OpRule> text_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
