// Training dropout: y = x * mask / (1 - rate), the mask drawn from Philox 4x32-10.
//
// The generator is the one in ir/philox.h, written out in the kernel so that the reference
// interpreter, the host backend (this same source on the CPU) and the GPU draw the identical
// mask for the same (seed, step): element i is kept when the top 24 bits of word i + word_offset of the
// stream reach dropout_threshold(rate). Each thread computes the Philox block of its element
// (a block holds 4 words; recomputing it per element keeps the kernel a plain grid-stride map).
#include <fmt/format.h>

#include "codegen/kernels/elementwise_util.h"
#include "ir/philox.h"

namespace kiln::codegen {

KernelSpec emit_philox_dropout(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::TensorType& type = node.results[0]->type;
  const int64_t count = ir::num_elements(type.shape);
  const double rate = attr<double>(node, "rate");
  const uint64_t seed = static_cast<uint64_t>(attr<int64_t>(node, "seed"));
  const int64_t word_offset = attr<int64_t>(node, "word_offset");
  const std::string index = "long long";
  const std::string& x = request.input_params[0];
  const std::string& step = request.input_params[1];
  const std::string& out = request.output_params[0];

  BodyWriter w;
  w.comment(fmt::format("dropout(rate = {}) in training mode: Philox 4x32-10 stream (seed {}, "
                        "offset = the step counter)",
                        rate, seed));
  w.line("constexpr {} kCount = {};", index, count);
  w.line("constexpr unsigned int kThreshold = {}u;  // keep when (word >> 8) >= rate * 2^24",
         ir::philox::dropout_threshold(rate));
  w.line("const {} kScale = {};  // 1 / (1 - rate)", compute_type(type.dtype),
         literal(type.dtype, 1.0 / (1.0 - rate)));
  w.line("const unsigned long long offset = static_cast<unsigned long long>({}[0]);", step);
  open_grid_stride_loop(w, "i", index, "kCount");
  w.comment("Counter (block of 4 words, offset); key = the seed. Ten rounds, as ir/philox.h.");
  if (word_offset != 0) {
    w.comment("This tensor's element 0 draws word " + std::to_string(word_offset) +
              " of the stream (a data-parallel rank's shard of the global batch).");
    w.line("const unsigned long long word_index = static_cast<unsigned long long>(i) + {}ull;",
           word_offset);
  } else {
    w.line("const unsigned long long word_index = static_cast<unsigned long long>(i);");
  }
  w.line("const unsigned long long block = word_index / 4;");
  w.line("unsigned int c0 = static_cast<unsigned int>(block), c1 = static_cast<unsigned int>(block >> 32);");
  w.line("unsigned int c2 = static_cast<unsigned int>(offset), c3 = static_cast<unsigned int>(offset >> 32);");
  w.line("unsigned int k0 = {}u, k1 = {}u;", static_cast<uint32_t>(seed),
         static_cast<uint32_t>(seed >> 32));
  w.line("for (int round = 0; round < {}; ++round) {{", ir::philox::kRounds);
  w.line("  const unsigned long long p0 = 0x{:X}ull * c0;", ir::philox::kMul0);
  w.line("  const unsigned long long p1 = 0x{:X}ull * c2;", ir::philox::kMul1);
  w.line("  const unsigned int n0 = static_cast<unsigned int>(p1 >> 32) ^ c1 ^ k0;");
  w.line("  const unsigned int n2 = static_cast<unsigned int>(p0 >> 32) ^ c3 ^ k1;");
  w.line("  c1 = static_cast<unsigned int>(p1);");
  w.line("  c3 = static_cast<unsigned int>(p0);");
  w.line("  c0 = n0;");
  w.line("  c2 = n2;");
  w.line("  k0 += 0x{:X}u;", ir::philox::kWeyl0);
  w.line("  k1 += 0x{:X}u;", ir::philox::kWeyl1);
  w.line("}");
  w.line("const unsigned int lane = static_cast<unsigned int>(word_index % 4);");
  w.line("const unsigned int word = lane == 0 ? c0 : lane == 1 ? c1 : lane == 2 ? c2 : c3;");
  w.line("const {} value = {};", compute_type(type.dtype), load(type.dtype, fmt::format("{}[i]", x)));
  w.line("{}[i] = {};", out,
         store(type.dtype, fmt::format("(word >> 8) >= kThreshold ? value * kScale : {}",
                                       literal(type.dtype, 0.0))));
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "Philox 4x32-10 mask, one element per thread and iteration";
  return spec;
}

}  // namespace kiln::codegen
