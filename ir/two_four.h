// 2:4 structured sparsity in the form sparse tensor cores read it (mma.sp, PTX ISA "Sparse
// matrix storage"): a matrix whose rows keep at most 2 nonzeros in every group of 4 consecutive
// elements is stored as its kept values (half the width) and, per kept value, its 2-bit
// position within its group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::ir {

// A rows x k matrix (k a multiple of 4) compressed for mma.sp on 16-bit operands.
struct TwoFourMatrix {
  int64_t rows = 0, k = 0;
  // rows x k / 2: the two kept values of each group, in k order (zeros where a group has fewer
  // than two nonzeros).
  std::vector<float> values;
  // rows x ceil(k / 16): the positions (0..3) of the kept values, eight to a word, the first in
  // the low 2 bits: word w of a row covers k 16w .. 16w + 15. Within each group the two
  // positions differ and increase (what mma.sp::ordered_metadata requires); groups past k (the
  // last word's padding) hold 0 and 1.
  std::vector<uint16_t> metadata;

  int64_t words_per_row() const { return (k + 15) / 16; }
  // The position of compressed column c (0 .. k / 2 - 1) of `row` within its group c / 2.
  int position(int64_t row, int64_t c) const {
    return metadata[row * words_per_row() + c / 8] >> (2 * (c % 8)) & 3;
  }
};

// Compresses the row-major rows x k matrix `dense`. Returns "" and fills `out`, or says where the
// pattern breaks ("row 3, k 8..11 has 3 nonzeros"; "k = 30 is not a multiple of 4"). A zero of
// either sign counts as zero; a NaN as a nonzero. Where a group has fewer than two nonzeros the
// smallest unused positions complete it, holding zeros.
std::string compress_two_four(const float* dense, int64_t rows, int64_t k, TwoFourMatrix* out);

// The dense rows x k matrix `compressed` stands for.
std::vector<float> expand_two_four(const TwoFourMatrix& compressed);

}  // namespace kiln::ir
