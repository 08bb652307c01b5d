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
    layer_norm_grad_cases()
