// Text for language models (`kiln train --data fortunes` or `--data text:PATH`): the bytes of a
// file, or of every text file of a directory, cut into windows of next-byte prediction.
//
// Tokens are bytes (a vocabulary of 256: any text, any language, nothing to train or ship).
// Window i covers bytes [i*T, i*T + T]: its sample is the first T bytes, its labels the last T
// (each byte's successor), so consecutive windows share one byte and every byte but the first
// is a label exactly once. Every tenth window (i % 10 == 9) is the test split, spread over the
// corpus rather than its tail, so both splits draw from every file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/data/dataset.h"

namespace kiln::data {

// Where Debian's package `fortunes` installs its cookie files: `--data fortunes`.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// True for "fortunes" and "text:PATH".
bool is_text_dataset(std::string_view spec);

// One split of a text dataset: samples i32 [N, T], labels i32 [N, T]. `context` is T, the
// model's sequence length. A directory contributes its regular files (symbolic links are not
// followed) in name order, skipping binary ones (a NUL byte: fortune's .dat indexes). Errors
// name the path: missing, unreadable, no text in it, or too short for one window of each split.
Dataset load_text_dataset(std::string_view spec, Split split, int64_t context);

}  // namespace kiln::data
