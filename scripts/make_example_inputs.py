#!/usr/bin/python3
"""Writes the sample inputs under examples/data/ (committed; rerun only to change them).

File names follow <model>.<input name>.npy, which tests/run_example.sh relies on.
The MNIST sample is a hand-drawn 7 on a 28x28 canvas, scaled to [0, 1] like MNIST pixels.
"""
import os
import numpy as np

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data")
os.makedirs(here, exist_ok=True)

digit = np.zeros((28, 28), dtype=np.float32)
digit[6:8, 7:21] = 1.0                      # the bar of the 7
for row in range(8, 24):                    # the stroke down to the left
    col = 20 - (row - 8) * 10 // 16
    digit[row, col - 1:col + 1] = 1.0
np.save(os.path.join(here, "mnist_cnn.image.npy"), digit.reshape(1, 1, 28, 28))

rng = np.random.default_rng(7)
np.save(os.path.join(here, "mlp.x.npy"), rng.standard_normal((4, 784)).astype(np.float32))
np.save(os.path.join(here, "resnet_block.x.npy"),
        rng.standard_normal((1, 16, 14, 14)).astype(np.float32))
