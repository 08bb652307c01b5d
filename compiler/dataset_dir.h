// `kiln train --data SPEC`: the built-in datasets by name, or a directory of .npy files.
//
// This part lives in compiler/ because it reads .npy files with compiler/npy.h, and runtime/
// (where datasets, IDX files and batching live: runtime/data/dataset.h) must not depend on
// compiler/. A DIR holds, per split, two arrays:
//   DIR/train.x.npy  inputs, any float dtype (<f4, <f2, <f8), or token ids (<i4, <i8), [N,...]
//   DIR/train.y.npy  labels, <i4 or <i8, shape [N] (or [N,...]: one per position), each >= 0
//   DIR/test.x.npy, DIR/test.y.npy   the same for the test split
// Inputs are used as stored (converted to f32, not rescaled).
#pragma once

#include <string>
#include <string_view>

#include "runtime/data/dataset.h"

namespace kiln::compiler {

// "mnist" or "fashion-mnist" (data::load_builtin_dataset), "fortunes" or "text:PATH"
// (data::load_text_dataset, in windows of `context` bytes: the model's sequence length), else a
// directory in the layout above. Anything else is a kiln::Error that says what SPEC may be.
// `first` > 0: a built-in dataset converts only its first `first` samples (a directory's
// arrays load whole).
data::Dataset load_dataset(std::string_view spec, data::Split split, int64_t first = 0,
                           int64_t context = 0);

// One split of a directory of .npy files (layout above).
data::Dataset load_npy_dataset_dir(const std::string& dir, data::Split split);

}  // namespace kiln::compiler
