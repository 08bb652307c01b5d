// `kiln generate`: sample text from a trained byte-level language model (docs/transformers.md).
//
// The model takes token ids [batch, context] and returns, per position, probabilities over the
// next token (softmax; other outputs are taken as logits). It is compiled once at batch 1; each
// new token runs it on the last `context` tokens, the prompt's and the sampled ones, reads the
// distribution at the last real position and draws from it. Shorter inputs are padded at the
// end: with causal attention, padding never reaches the positions before it. No key/value cache
// yet: each token costs a forward pass over the whole window.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "runtime/compile/kernel_cache.h"

namespace kiln::compiler {

struct GenerateOptions {
  std::string model;        // a model file (kiln JSON, ONNX, textual IR)
  std::string checkpoint;   // a kiln train checkpoint (or any safetensors of the parameters)
  std::string prompt;       // bytes to start from (at least one)
  int64_t tokens = 200;     // how many to sample
  double temperature = 0.8; // 0: always the most likely token
  int64_t top_k = 0;        // > 0: draw among the k most likely tokens only
  uint64_t seed = 0;        // of the sampling stream
  std::string backend = "auto";  // auto, host, cuda, reference
  runtime::KernelCache* cache = nullptr;
  bool verbose = false;
};

// Writes the prompt, then each sampled byte as it is drawn, to `out`. Returns the sampled bytes.
// kiln::Error for a model that is not a language model, a checkpoint that does not fit it, or
// bad options.
std::string generate(const GenerateOptions& options, std::ostream& out);

}  // namespace kiln::compiler
