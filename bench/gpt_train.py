"""examples/gpt.json trained by `kiln train` on the fortunes corpus, beside the same model in
PyTorch from the same initial weights on the same batches: the loss curves side by side, and the
time per step of each on this machine's CPU (kiln: the host backend, the generated CUDA run on
the CPU; PyTorch: its CPU kernels, float32).

The batches are the same because kiln's shuffle is specified (runtime/data/dataset.h:
Fisher-Yates driven by std::mt19937_64 seeded through std::seed_seq, both defined exactly by
the C++ standard, with kiln's own rejection sampling), and this script implements it again.
Both runs start from one draw of GPT-2's initialization (examples/gpt/make_gpt.py) written to a
safetensors file. Both use AdamW (lr 1e-3, weight decay 0.01), linear warmup then cosine decay
to 0.1 and clipping at global norm 1.

Usage: /usr/bin/python3 bench/gpt_train.py --kiln build/kiln [--steps 200] [--batch-size 16]
       [--threads N] [--work /tmp/kiln-gpt-bench]
"""
import argparse
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "gpt"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))
import make_gpt  # noqa: E402
import gpt_check  # noqa: E402  (the PyTorch model, the safetensors writer, the schedule)

FORTUNES = "/usr/share/games/fortunes"
LAYERS, D, HEADS, CONTEXT, VOCAB = 4, 128, 4, 128, 256
LR, WARMUP, MIN_SCALE, MAX_NORM, SEED = 1e-3, 20, 0.1, 1.0, 0
MASK32, MASK64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


# ---- kiln's shuffle (runtime/data/dataset.cpp: epoch_permutation) ----------------------------
def seed_seq(words, n):
    """std::seed_seq::generate of `n` 32-bit words ([rand.util.seedseq])."""
    b = [0x8b8b8b8b] * n
    s = len(words)
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p, m = (n - t) // 2, max(s + 1, n)
    q = p + t
    mix = lambda x: x ^ (x >> 27)
    for k in range(m):
        r1 = (1664525 * mix(b[k % n] ^ b[(k + p) % n] ^ b[(k - 1) % n])) & MASK32
        r2 = (r1 + (s if k == 0 else (k % n + words[k - 1]) if k <= s else k % n)) & MASK32
        b[(k + p) % n] = (b[(k + p) % n] + r1) & MASK32
        b[(k + q) % n] = (b[(k + q) % n] + r2) & MASK32
        b[k % n] = r2
    for k in range(m, m + n):
        r3 = (1566083941 * mix((b[k % n] + b[(k + p) % n] + b[(k - 1) % n]) & MASK32)) & MASK32
        r4 = (r3 - k % n) & MASK32
        b[(k + p) % n] ^= r3
        b[(k + q) % n] ^= r4
        b[k % n] = r4
    return b


class Mt19937_64:
    def __init__(self, words):
        raw = seed_seq(words, 624)
        self.state = [raw[2 * i] | (raw[2 * i + 1] << 32) for i in range(312)]
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            x = self.state
            for i in range(312):
                y = (x[i] & 0xFFFFFFFF80000000) | (x[(i + 1) % 312] & 0x7FFFFFFF)
                x[i] = x[(i + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
            self.index = 0
        y = self.state[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def epoch_permutation(size, seed, epoch):
    engine = Mt19937_64([seed & MASK32, seed >> 32, epoch & MASK32, epoch >> 32])
    order = list(range(size))
    for i in range(size - 1, 0, -1):
        bound = i + 1
        threshold = (2 ** 64 - bound) % bound
        while True:
            draw = engine()
            if draw >= threshold:
                break
        j = draw % bound
        order[i], order[j] = order[j], order[i]
    return order


# ---- the corpus, as runtime/data/text.h cuts it -----------------------------------------------
def fortunes_windows():
    corpus = b""
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        data = open(path, "rb").read()
        if b"\0" not in data:
            corpus += data
    data = np.frombuffer(corpus, dtype=np.uint8)
    count = (len(data) - 1) // CONTEXT
    train = [i for i in range(count) if i % 10 != 9]
    x = np.stack([data[i * CONTEXT:i * CONTEXT + CONTEXT] for i in train]).astype(np.int64)
    y = np.stack([data[i * CONTEXT + 1:i * CONTEXT + CONTEXT + 1] for i in train]).astype(np.int64)
    return x, y


def torch_run(weights, x, y, steps, batch):
    gpt_check.LAYERS, gpt_check.D, gpt_check.HEADS, gpt_check.CONTEXT = LAYERS, D, HEADS, CONTEXT
    params = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    optimizer = torch.optim.AdamW(params.values(), lr=LR)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: gpt_check.lr_factor(k, WARMUP, steps, MIN_SCALE))
    order = epoch_permutation(len(x), SEED, 0)
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        picked = order[step * batch:(step + 1) * batch]
        tokens, labels = torch.tensor(x[picked]), torch.tensor(y[picked])
        optimizer.zero_grad()
        loss = F.cross_entropy(gpt_check.gpt_forward(params, tokens).reshape(-1, VOCAB),
                               labels.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), MAX_NORM)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses, (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--work", default="/tmp/kiln-gpt-bench")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="PyTorch's threads (default: every core, as kiln's host backend)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    rng = np.random.default_rng(2026)
    weights = {}
    for name, shape in make_gpt.parameter_shapes(LAYERS, D, CONTEXT, VOCAB).items():
        init = make_gpt.initializer(name, LAYERS, 0)
        weights[name] = (np.zeros(shape) if init["kind"] == "zeros" else np.ones(shape)
                         if init["kind"] == "ones" else rng.standard_normal(shape) * init["std"]
                         ).astype(np.float32)
    gpt_check.write_safetensors(os.path.join(args.work, "init.safetensors"), weights)
    model = os.path.join(args.work, "gpt.json")
    subprocess.run([sys.executable, make_gpt.__file__, "--weights", "init.safetensors", "-o", model],
                   check=True)
    x, y = fortunes_windows()

    log = os.path.join(args.work, "kiln_loss.csv")
    cmd = [args.kiln, "train", model, "--data", "fortunes", "--backend", "host",
           "--batch-size", str(args.batch_size), "--epochs", "1", "--max-steps", str(args.steps),
           "--test-samples", "256", "--seed", str(SEED), "--optimizer", "adamw", "--lr", str(LR),
           "--lr-schedule", "cosine", "--warmup-steps", str(WARMUP), "--total-steps",
           str(args.steps), "--min-lr-scale", str(MIN_SCALE), "--clip-grad-norm", str(MAX_NORM),
           "--loss-log", log]
    print("kiln:", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"kiln train failed:\n{result.stderr}")
    print(result.stdout, flush=True)
    kiln_losses = [float(line.split(",")[2]) for line in open(log).read().splitlines()[1:]]
    rate = float(re.search(r"\((\d+) tok/s", result.stdout).group(1))
    kiln_step = args.batch_size * CONTEXT / rate

    torch.manual_seed(0)
    torch_losses, torch_step = torch_run(weights, x, y, args.steps, args.batch_size)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("  step    kiln   PyTorch  difference")
    for step in sorted(set(list(range(0, args.steps, max(1, args.steps // 20))) + [args.steps - 1])):
        k, t = kiln_losses[step], torch_losses[step]
        print(f"{step + 1:6d}  {k:.4f}  {t:.4f}  {100 * (k - t) / t:+.2f}%")
    worst = max(abs(k - t) / t for k, t in zip(kiln_losses, torch_losses))
    print(f"\nworst difference over all {args.steps} steps: {100 * worst:.3f}%")
    tail = max(1, args.steps // 10)
    k_end, t_end = np.mean(kiln_losses[-tail:]), np.mean(torch_losses[-tail:])
    print(f"mean loss of the last {tail} steps: kiln {k_end:.4f}, PyTorch {t_end:.4f} "
          f"({100 * (k_end - t_end) / t_end:+.2f}%)")
    print(f"time per step (batch {args.batch_size} x {CONTEXT} tokens): kiln host backend "
          f"{kiln_step:.2f} s, PyTorch CPU {torch_step:.2f} s")


if __name__ == "__main__":
    main()
