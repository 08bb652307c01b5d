#include "ir/two_four.h"

#include <fmt/format.h>

namespace kiln::ir {

std::string compress_two_four(const float* dense, int64_t rows, int64_t k, TwoFourMatrix* out) {
  if (rows < 0 || k < 0) return fmt::format("a {} x {} matrix has no 2:4 form", rows, k);
  if (k % 4 != 0) return fmt::format("k = {} is not a multiple of 4", k);
  TwoFourMatrix result;
  result.rows = rows;
  result.k = k;
  result.values.assign(static_cast<size_t>(rows * k / 2), 0.0f);
  // Padding groups (past k in a row's last word) hold positions 0 and 1: 0b0100 each.
  result.metadata.assign(static_cast<size_t>(rows * result.words_per_row()), 0x4444);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t group = 0; group < k / 4; ++group) {
      const float* elements = dense + row * k + group * 4;
      int kept[2], count = 0;
      for (int i = 0; i < 4; ++i) {
        if (elements[i] == 0.0f) continue;
        if (count == 2)
          return fmt::format("row {}, k {}..{} has 3 nonzeros or more", row, group * 4, group * 4 + 3);
        kept[count++] = i;
      }
      // Complete the pair with the smallest unused positions, in increasing order.
      for (int i = 0; i < 4 && count < 2; ++i) {
        if (count == 1 && kept[0] == i) continue;
        if (count == 1 && kept[0] > i) {
          kept[1] = kept[0];
          kept[0] = i;
        } else {
          kept[count] = i;
        }
        ++count;
      }
      const int64_t c = group * 2;  // the group's first compressed column
      result.values[row * k / 2 + c] = elements[kept[0]];
      result.values[row * k / 2 + c + 1] = elements[kept[1]];
      uint16_t& word = result.metadata[row * result.words_per_row() + c / 8];
      const int shift = 2 * static_cast<int>(c % 8);
      word = static_cast<uint16_t>((word & ~(0xf << shift)) | (kept[0] | kept[1] << 2) << shift);
    }
  }
  *out = std::move(result);
  return "";
}

std::vector<float> expand_two_four(const TwoFourMatrix& compressed) {
  std::vector<float> dense(static_cast<size_t>(compressed.rows * compressed.k), 0.0f);
  for (int64_t row = 0; row < compressed.rows; ++row)
    for (int64_t c = 0; c < compressed.k / 2; ++c)
      dense[row * compressed.k + c / 2 * 4 + compressed.position(row, c)] =
          compressed.values[row * compressed.k / 2 + c];
  return dense;
}

}  // namespace kiln::ir
