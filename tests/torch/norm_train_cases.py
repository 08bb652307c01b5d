"""PyTorch cases for normalization in training (ir/ops/norm_train_ops.cpp).

batch_norm_train is F.batch_norm(training=True) plus the batch statistics it normalized with
(mean and biased variance per channel). The backward ops are checked against torch.autograd in
float64: batch_norm_train_grad's (dx, dscale, dbias) is the vector-Jacobian product of
F.batch_norm(training=True) with respect to (x, weight, bias); layer_norm_grad's dx is that of
F.layer_norm, and its second result dy * xhat is what sums (over the rows) to dscale.
"""
import torch
import torch.nn.functional as F

from case_writer import add_case, randn


def channel_dims(x):
    return [d for d in range(x.dim()) if d != 1]


def batch_stats(x):
    dims = channel_dims(x)
    return x.mean(dims), x.var(dims, unbiased=False)


def batch_norm_vjp(dy, x, scale, eps):
    x, scale = x.detach().requires_grad_(True), scale.detach().requires_grad_(True)
    bias = torch.zeros_like(scale, requires_grad=True)
    y = F.batch_norm(x, None, None, scale, bias, training=True, eps=eps)
    return tuple(g.detach() for g in torch.autograd.grad(y, (x, scale, bias), dy))


def batch_norm_train_cases():
    for name, xs, eps in (("nchw", (2, 3, 4, 5), None), ("2d", (7, 4), 1e-2),
                          ("3d", (3, 2, 5), None), ("n1", (1, 3, 2, 2), None),
                          ("two_values", (2, 5), None), ("big_channel", (4, 3, 16, 17), 1e-3),
                          ("c1", (5, 1, 3, 3), None)):
        c = xs[1]
        x = randn(*xs, scale=2) + 1
        attrs = {} if eps is None else {"epsilon": eps}
        eps = eps or 1e-5

        def forward(x, scale, bias, eps=eps):
            y = F.batch_norm(x, None, None, scale, bias, training=True, eps=eps)
            return (y,) + batch_stats(x)
        add_case(f"batch_norm_train_op_{name}", "batch_norm_train", attrs,
                 [x, randn(c), randn(c)], forward)

        # The backward op reads the forward's statistics, rounded to f32 as kiln saves them.
        mean, var = (s.float() for s in batch_stats(x.double()))
        add_case(f"batch_norm_train_grad_{name}", "batch_norm_train_grad", attrs,
                 [randn(*xs), x, randn(c), mean, var],
                 lambda dy, x, scale, mean, var, eps=eps: batch_norm_vjp(dy, x, scale, eps))
    x = randn(2, 3, 4, 4).half()
    add_case("batch_norm_train_op_f16", "batch_norm_train", {}, [x, randn(3).half(), randn(3).half()],
             lambda x, s, b: (F.batch_norm(x, None, None, s, b, training=True),) + batch_stats(x))


def channel_chunks(x, chunks):
    """Each channel's values in kiln's order (n, then the trailing dims), cut as
    split-batch-norm cuts them: chunk s is [s * L, min(M, (s + 1) * L)), L = ceil(M / chunks)."""
    values = x.transpose(0, 1).reshape(x.shape[1], -1)
    length = -(-values.shape[1] // chunks)
    return [values[:, s * length:(s + 1) * length] for s in range(chunks)]


def chunk_stats(x, chunks):
    """[chunks, 2, C]: each chunk's mean and sum of squared deviations from it."""
    stats = []
    for part in channel_chunks(x, chunks):
        mean = part.mean(1)
        stats.append(torch.stack([mean, ((part - mean[:, None]) ** 2).sum(1)]))
    return torch.stack(stats)


def chunk_sums(dy, x, mean, var, eps, chunks):
    """[chunks, 2, C]: each chunk's sums of dy and dy * xhat."""
    c = x.shape[1]
    shape = [1, c] + [1] * (x.dim() - 2)
    xhat = (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps)
    return torch.stack([torch.stack([d.sum(1), (d * h).sum(1)])
                        for d, h in zip(channel_chunks(dy, chunks), channel_chunks(xhat, chunks))])


def per_channel(v, x):
    return v.reshape([1, x.shape[1]] + [1] * (x.dim() - 2))


def normalize_from_chunk_stats(x, scale, bias, stats, eps=1e-5):
    """batch_norm_train given the chunk statistics (rounded as kiln stores them): the channel
    moments combined from them (Chan et al.), then F.batch_norm's normalize with those."""
    counts = torch.tensor([part.shape[1] for part in channel_chunks(x, stats.shape[0])],
                          dtype=x.dtype)[:, None]
    total = counts.sum()
    mean = (counts * stats[:, 0]).sum(0) / total
    var = (stats[:, 1] + counts * (stats[:, 0] - mean) ** 2).sum(0) / total
    y = (x - per_channel(mean, x)) / torch.sqrt(per_channel(var, x) + eps)
    return y * per_channel(scale, x) + per_channel(bias, x), mean, var


def grad_from_chunk_sums(dy, x, scale, mean, var, sums, eps):
    """batch_norm_train_grad given the chunk sums: dbias and dscale are their totals, and dx is
    the vector-Jacobian product's formula with those totals."""
    count = x.numel() // x.shape[1]
    sum_dy, sum_dy_xhat = sums[:, 0].sum(0), sums[:, 1].sum(0)
    inv_std = 1 / torch.sqrt(var + eps)
    xhat = (x - per_channel(mean, x)) * per_channel(inv_std, x)
    dx = per_channel(scale * inv_std, x) * (
        dy - per_channel(sum_dy / count, x) - xhat * per_channel(sum_dy_xhat / count, x))
    return dx, sum_dy_xhat, sum_dy


def batch_norm_chunk_cases():
    """split-batch-norm's ops, and batch_norm_train and its gradient reading their partials (the
    partials as kiln stores them: f32). Ragged last chunks, one chunk, a chunk per value."""
    for name, xs, chunks in (("ragged", (3, 4, 7, 9), 5), ("one_chunk", (2, 3, 5), 1),
                             ("per_value", (2, 3, 2), 4), ("2d", (37, 3), 3)):
        c = xs[1]
        x = randn(*xs, scale=2) + 30  # off-centre: E[x^2] - E[x]^2 would lose digits
        add_case(f"batch_norm_chunk_stats_{name}", "batch_norm_chunk_stats", {"chunks": chunks},
                 [x], lambda x, chunks=chunks: chunk_stats(x, chunks))
        stats = chunk_stats(x.double(), chunks).float()
        add_case(f"batch_norm_train_chunked_{name}", "batch_norm_train", {},
                 [x, randn(c), randn(c), stats], normalize_from_chunk_stats)
        mean, var = (t.float() for t in batch_stats(x.double()))
        dy = randn(*xs)
        add_case(f"batch_norm_chunk_sums_{name}", "batch_norm_chunk_sums",
                 {"chunks": chunks, "epsilon": 1e-3}, [dy, x, mean, var],
                 lambda dy, x, m, v, chunks=chunks: chunk_sums(dy, x, m, v, 1e-3, chunks))
        sums = chunk_sums(dy.double(), x.double(), mean.double(), var.double(), 1e-3, chunks).float()
        add_case(f"batch_norm_train_grad_chunked_{name}", "batch_norm_train_grad",
                 {"epsilon": 1e-3}, [dy, x, randn(c), mean, var, sums],
                 lambda dy, x, scale, m, v, sums: grad_from_chunk_sums(dy, x, scale, m, v, sums, 1e-3))


def layer_norm_grad_cases():
    for name, xs, axis, eps in (("last", (4, 7), None, None), ("3d_axis1", (2, 3, 8), 1, None),
                                ("3d_neg2", (3, 4, 5), -2, 1e-3), ("all", (3, 5), 0, None),
                                ("size1", (5, 1), -1, None), ("offset", (3, 16), -1, 1e-6),
                                ("long_rows", (3, 1100), -1, None)):
        a = (axis if axis is not None else -1) % len(xs)
        x = randn(*xs) * 3 + (100 if name == "offset" else 0)
        attrs = {}
        if axis is not None:
            attrs["axis"] = axis
        if eps is not None:
            attrs["epsilon"] = eps
        norm_shape = xs[a:]

        def oracle(dy, x, scale, norm_shape=norm_shape, eps=eps or 1e-5):
            x = x.detach().requires_grad_(True)
            (dx,) = torch.autograd.grad(F.layer_norm(x, norm_shape, scale, None, eps), x, dy)
            xhat = F.layer_norm(x.detach(), norm_shape, None, None, eps)
            return dx.detach(), dy * xhat
        add_case(f"layer_norm_grad_{name}", "layer_norm_grad", attrs,
                 [randn(*xs), x, randn(*norm_shape)], oracle)
    h = lambda *shape: randn(*shape).half()
    add_case("layer_norm_grad_f16", "layer_norm_grad", {}, [h(4, 8), h(4, 8), h(8)],
             lambda dy, x, s: (torch.autograd.grad(
                 F.layer_norm(x.requires_grad_(True), (8,), s), x, dy)[0].detach(),
                 dy * F.layer_norm(x.detach(), (8,))))


def norm_train_cases():
    batch_norm_train_cases()
    batch_norm_chunk_cases()
    layer_norm_grad_cases()
