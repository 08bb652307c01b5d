// Training data: a `--data DIR` directory of .npy files (compiler/dataset_dir.h), IDX files
// (MNIST's format, runtime/data/idx.h) and byte-level text (runtime/data/text.h). The first
// byte picks the format (and, for text, the window length); for a directory the rest is split
// at a 2-byte length into train.x.npy and train.y.npy.
#include <span>

#include "compiler/dataset_dir.h"
#include "kiln/error.h"
#include "runtime/data/idx.h"
#include "runtime/data/text.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool idx = data[0] & 1;
  const bool text = data[0] & 2;
  const int64_t context = data[0] >> 2;  // 0..63: 0 is refused like a model without token ids
  ++data;
  --size;
  try {
    if (text && !idx) {
      const std::string path = kiln::fuzz::write_scratch("corpus.txt", kiln::fuzz::as_text(data, size));
      for (kiln::data::Split split : {kiln::data::Split::Train, kiln::data::Split::Test}) {
        kiln::data::Dataset dataset = kiln::data::load_text_dataset("text:" + path, split, context);
        for (int64_t i = 0; i < dataset.labels.num_elements(); ++i) (void)dataset.labels.get(i);
      }
      return 0;
    }
    if (idx) {
      const std::string path = kiln::fuzz::write_scratch("input.idx", kiln::fuzz::as_text(data, size));
      kiln::data::IdxArray array = kiln::data::read_idx(path);
      for (int64_t i = 0; i < array.num_elements(); ++i) (void)array.get(i);
      return 0;
    }
    if (size < 2) return 0;
    const size_t x_size = std::min<size_t>(size - 2, size_t{data[0]} | size_t{data[1]} << 8);
    const std::string_view rest = kiln::fuzz::as_text(data + 2, size - 2);
    kiln::fuzz::write_scratch("train.x.npy", rest.substr(0, x_size));
    kiln::fuzz::write_scratch("train.y.npy", rest.substr(x_size));
    kiln::data::Dataset dataset = kiln::compiler::load_npy_dataset_dir(
        kiln::fuzz::scratch_dir().string(), kiln::data::Split::Train);
    (void)dataset;
  } catch (const kiln::Error&) {
  }
  return 0;
}
