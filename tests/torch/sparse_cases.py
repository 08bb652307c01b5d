"""expand_2_4 cases: a 2:4 weight's kept values put back at their positions by torch.scatter.

The positions input is the compressed form's (ir/two_four.h): per row, eight 2-bit positions to
a 16-bit word, the first lowest, words covering k 16w .. 16w + 15; groups past k read 0 and 1.
It is written here from the pairs it encodes (NumPy, u16: this PyTorch has no uint16), so the
oracle and the encoding are separate pieces of code.
"""
import numpy as np
import torch

from case_writer import add_case, randn

PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def encode(pairs, k):
    """pairs [rows, k / 4, 2] -> u16 words [rows, ceil(k / 16)]."""
    rows = pairs.shape[0]
    words = np.full((rows, (k + 15) // 16), 0x4444, np.uint16)
    for r in range(rows):
        for g in range(k // 4):
            w, slot = divmod(g, 4)
            nibble = int(pairs[r, g, 0]) | int(pairs[r, g, 1]) << 2
            words[r, w] = (int(words[r, w]) & ~(0xF << 4 * slot) | nibble << 4 * slot) & 0xFFFF
    return words


def expand_two_four_cases():
    for name, shape, dtype in [("conv", (4, 2, 4, 4), torch.float32), ("rows_of_20", (3, 20), torch.float32),
                               ("padded_words", (5, 1, 6, 4), torch.float32), ("f16", (2, 32), torch.float16)]:
        rows, k = shape[0], int(np.prod(shape[1:]))
        pairs = torch.tensor([[PAIRS[(r * 5 + g) % 6] for g in range(k // 4)] for r in range(rows)])
        kept = randn(rows, k // 2).to(dtype)
        positions = encode(pairs.numpy(), k)

        def oracle(kept, positions, pairs=pairs, rows=rows, k=k, shape=shape):
            dense = torch.zeros(rows, k // 4, 4, dtype=kept.dtype)
            return dense.scatter(2, pairs, kept.reshape(rows, k // 4, 2)).reshape(shape)

        add_case(f"expand_2_4_{name}", "expand_2_4", {"shape": list(shape)}, [kept, positions], oracle)
