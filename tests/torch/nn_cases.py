"""Differential-test cases for the neural-network ops: conv2d, matmul, dense, bias_add, pooling,
batch_norm, layer_norm, softmax and log_softmax.

Asymmetric padding has no native PyTorch form: conv2d and the pools take F.pad first (with -inf
for max pooling, and a padded all-ones mask to count the real taps when count_include_pad is
false). Symmetric pool padding uses PyTorch's own padding, which checks that the F.pad
formulation agrees with it.
"""
import math

import torch
import torch.nn.functional as F

from case_writer import add_case, randn, shape_tag

def torch_pad(pad):
    """kiln's [top, left, bottom, right] as F.pad's (left, right, top, bottom)."""
    top, left, bottom, right = pad
    return (left, right, top, bottom)


def conv_cases():
    # (name, x shape, weight shape, bias?, stride, pad, dilation, groups)
    specs = [
        ("basic", (1, 1, 5, 5), (1, 1, 3, 3), True, [1, 1], [0, 0, 0, 0], [1, 1], 1),
        ("no_bias", (2, 3, 7, 6), (4, 3, 3, 3), False, [1, 1], [0, 0, 0, 0], [1, 1], 1),
        ("pad_same", (1, 3, 8, 8), (5, 3, 3, 3), True, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        ("stride_2", (2, 2, 9, 11), (3, 2, 3, 3), True, [2, 2], [1, 1, 1, 1], [1, 1], 1),
        ("stride_2x3", (1, 2, 13, 13), (3, 2, 3, 2), True, [2, 3], [0, 0, 0, 0], [1, 1], 1),
        ("pad_asym", (1, 2, 6, 7), (3, 2, 3, 3), True, [1, 1], [1, 0, 2, 1], [1, 1], 1),
        ("pad_asym_stride", (2, 3, 10, 9), (2, 3, 4, 4), True, [2, 2], [0, 1, 1, 2], [1, 1], 1),
        ("pad_top_only", (1, 1, 4, 4), (1, 1, 2, 2), False, [1, 1], [3, 0, 0, 0], [1, 1], 1),
        ("dilation_2", (1, 2, 11, 11), (2, 2, 3, 3), True, [1, 1], [0, 0, 0, 0], [2, 2], 1),
        ("dilation_2x3_pad", (1, 2, 9, 13), (3, 2, 3, 3), True, [1, 1], [2, 3, 2, 3], [2, 3], 1),
        ("dilation_stride", (2, 1, 17, 15), (2, 1, 3, 3), False, [2, 2], [1, 1, 1, 1], [3, 2], 1),
        ("groups_3", (2, 6, 7, 7), (9, 2, 3, 3), True, [1, 1], [1, 1, 1, 1], [1, 1], 3),
        ("groups_2_asym", (1, 4, 8, 5), (6, 2, 3, 1), True, [1, 2], [0, 1, 2, 0], [1, 1], 2),
        ("depthwise", (2, 5, 9, 9), (5, 1, 3, 3), True, [1, 1], [1, 1, 1, 1], [1, 1], 5),
        ("depthwise_mult_2", (1, 3, 8, 10), (6, 1, 3, 3), False, [2, 2], [1, 1, 1, 1], [1, 1], 3),
        ("pointwise", (3, 7, 5, 3), (11, 7, 1, 1), True, [1, 1], [0, 0, 0, 0], [1, 1], 1),
        ("rect_kernel_1x5", (1, 2, 6, 9), (3, 2, 1, 5), True, [1, 1], [0, 2, 0, 2], [1, 1], 1),
        ("kernel_equals_input", (2, 3, 5, 5), (4, 3, 5, 5), True, [1, 1], [0, 0, 0, 0], [1, 1], 1),
        ("out_1x1_big_stride", (1, 1, 3, 3), (1, 1, 3, 3), True, [5, 5], [0, 0, 0, 0], [1, 1], 1),
        ("wide_channels", (1, 16, 5, 5), (8, 16, 3, 3), True, [1, 1], [1, 1, 1, 1], [1, 1], 1),
    ]
    for name, xs, ws, has_bias, stride, pad, dilation, groups in specs:
        x, w = randn(*xs), randn(*ws, scale=0.5)
        inputs = [x, w] + ([randn(ws[0])] if has_bias else [])
        attrs = {"stride": stride, "pad": pad, "dilation": dilation, "groups": groups}

        def oracle(x, w, b=None, stride=stride, pad=pad, dilation=dilation, groups=groups):
            return F.conv2d(F.pad(x, torch_pad(pad)), w, b, stride, 0, dilation, groups)
        add_case(f"conv2d_{name}", "conv2d", attrs, inputs, oracle)
    # Defaults filled by inference.
    add_case("conv2d_defaults", "conv2d", {}, [randn(1, 2, 4, 5), randn(3, 2, 2, 2)],
             lambda x, w: F.conv2d(x, w))


def matmul_cases():
    # (name, a shape, b shape, transpose_a, transpose_b); shapes as stored.
    specs = [
        ("2d", (3, 5), (5, 4), False, False),
        ("vector_like", (1, 7), (7, 1), False, False),
        ("k1", (4, 1), (1, 6), False, False),
        ("batch", (2, 3, 5), (2, 5, 7), False, False),
        ("batch_broadcast_b", (4, 3, 5), (5, 2), False, False),
        ("batch_broadcast_a", (3, 5), (2, 5, 4), False, False),
        ("batch_ones", (2, 1, 3, 4), (5, 4, 6), False, False),
        ("batch_rank_diff", (3, 1, 2, 3, 4), (2, 4, 3), False, False),
        ("transpose_a", (5, 3), (5, 4), True, False),
        ("transpose_b", (3, 5), (4, 5), False, True),
        ("transpose_both", (5, 3), (4, 5), True, True),
        ("transpose_batch", (2, 6, 3), (1, 7, 6), True, True),
        ("transpose_b_bcast", (2, 3, 13), (11, 13), False, True),
        ("primes", (7, 11), (11, 13), False, False),
    ]
    for name, sa, sb, ta, tb in specs:
        def oracle(a, b, ta=ta, tb=tb):
            return torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
        attrs = {} if not (ta or tb) else {"transpose_a": ta, "transpose_b": tb}
        add_case(f"matmul_{name}", "matmul", attrs, [randn(*sa), randn(*sb)], oracle)

    for name, xs, n, has_bias in (("2d", (4, 7), 5, True), ("3d", (2, 3, 6), 4, True),
                                  ("no_bias", (3, 5), 2, False), ("1d", (9,), 3, True),
                                  ("n1", (6, 4), 1, True), ("4d", (2, 1, 3, 8), 7, False)):
        inputs = [randn(*xs), randn(n, xs[-1])] + ([randn(n)] if has_bias else [])
        add_case(f"dense_{name}", "dense", {}, inputs, F.linear)

    for name, xs, axis in (("nchw", (2, 3, 4, 5), None), ("last", (2, 3, 4), -1),
                           ("first", (5, 2, 3), 0), ("2d", (4, 6), 1), ("neg2", (2, 7, 3), -2)):
        def oracle(x, b, axis=axis):
            a = 1 if axis is None else axis % x.dim()
            return x + b.reshape([-1] + [1] * (x.dim() - a - 1))
        a = 1 if axis is None else axis % len(xs)
        attrs = {} if axis is None else {"axis": axis}
        add_case(f"bias_add_{name}", "bias_add", attrs, [randn(*xs), randn(xs[a])], oracle)


def pool_cases():
    # (name, x shape, kernel, stride or None, pad, dilation)
    specs = [
        ("k2", (1, 2, 6, 6), [2, 2], None, [0, 0, 0, 0], [1, 1]),
        ("k3_s1_p1", (2, 3, 7, 7), [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        ("k3_s2_p1", (1, 2, 9, 11), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
        ("odd_k2", (1, 1, 7, 5), [2, 2], None, [0, 0, 0, 0], [1, 1]),
        ("rect", (2, 1, 8, 9), [3, 2], [1, 2], [0, 1, 0, 1], [1, 1]),
        ("asym_pad", (1, 2, 6, 7), [3, 3], [2, 2], [1, 0, 0, 1], [1, 1]),
        ("asym_pad_2", (1, 1, 5, 5), [4, 4], [1, 1], [2, 1, 0, 2], [1, 1]),
        ("k1", (1, 3, 4, 4), [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        ("global_like", (2, 2, 5, 5), [5, 5], None, [0, 0, 0, 0], [1, 1]),
    ]
    dilated = [("dilation_2", (1, 2, 9, 9), [3, 3], [1, 1], [1, 1, 1, 1], [2, 2]),
               ("dilation_2x1_asym", (1, 1, 10, 8), [2, 3], [2, 1], [0, 1, 1, 0], [2, 1])]
    for name, xs, kernel, stride, pad, dilation in specs + dilated:
        x = randn(*xs)
        x.view(-1)[::7] = -5.0  # ties and negatives, so -inf padding matters
        attrs = {"kernel": kernel, "pad": pad}
        if stride is not None:
            attrs["stride"] = stride
        if dilation != [1, 1]:
            attrs["dilation"] = dilation
        s = stride or kernel
        symmetric = pad[0] == pad[2] and pad[1] == pad[3]

        def max_oracle(t, kernel=kernel, s=s, pad=pad, dilation=dilation, symmetric=symmetric):
            if symmetric:
                return F.max_pool2d(t, kernel, s, pad[:2], dilation)
            return F.max_pool2d(F.pad(t, torch_pad(pad), value=-math.inf), kernel, s, 0, dilation)
        add_case(f"max_pool2d_{name}", "max_pool2d", attrs, [x], max_oracle)
        if dilation != [1, 1]:
            continue  # avg_pool2d has no dilation
        attrs = {k: v for k, v in attrs.items() if k != "dilation"}
        for include in (True, False):
            def avg_oracle(t, kernel=kernel, s=s, pad=pad, include=include, symmetric=symmetric):
                if symmetric:
                    return F.avg_pool2d(t, kernel, s, pad[:2], count_include_pad=include)
                total = F.avg_pool2d(F.pad(t, torch_pad(pad)), kernel, s)
                if include:
                    return total
                inside = F.avg_pool2d(F.pad(torch.ones_like(t), torch_pad(pad)), kernel, s)
                return total / inside
            tag = "incl" if include else "excl"
            add_case(f"avg_pool2d_{name}_{tag}", "avg_pool2d",
                     dict(attrs, count_include_pad=include), [x], avg_oracle)
    for xs in ((1, 1, 1, 1), (2, 3, 5, 7), (1, 8, 4, 4)):
        add_case(f"global_avg_pool_{shape_tag(xs)}", "global_avg_pool", {}, [randn(*xs)],
                 lambda t: t.mean((2, 3), keepdim=True))


def norm_cases():
    for name, xs, training, eps in (("nchw", (2, 3, 4, 5), False, None),
                                    ("2d", (6, 4), False, None), ("3d", (3, 5, 7), False, 1e-3),
                                    ("c1", (4, 1, 3, 3), False, None),
                                    ("train_nchw", (2, 3, 4, 5), True, None),
                                    ("train_2d", (7, 4), True, 1e-2),
                                    ("train_3d", (3, 2, 5), True, None),
                                    ("train_n1", (1, 3, 2, 2), True, None)):
        c = xs[1]
        inputs = [randn(*xs, scale=2) + 1, randn(c), randn(c), randn(c), torch.rand(c) + 0.5]
        attrs = {"training": training} if training else {}
        if eps is not None:
            attrs["epsilon"] = eps

        def oracle(x, scale, bias, mean, var, training=training, eps=eps or 1e-5):
            if training:
                return F.batch_norm(x, None, None, scale, bias, training=True, eps=eps)
            return F.batch_norm(x, mean, var, scale, bias, training=False, eps=eps)
        add_case(f"batch_norm_{name}", "batch_norm", attrs, inputs, oracle)

    for name, xs, axis, eps in (("last", (4, 7), None, None), ("3d_last", (2, 3, 8), -1, None),
                                ("3d_axis1", (2, 3, 8), 1, None), ("3d_neg2", (3, 4, 5), -2, 1e-3),
                                ("all", (3, 5), 0, None), ("4d_axis2", (2, 3, 4, 5), 2, None),
                                ("size1", (5, 1), -1, None), ("offset", (3, 16), -1, 1e-6)):
        a = (axis if axis is not None else -1) % len(xs)
        x = randn(*xs) * 3 + (100 if name == "offset" else 0)
        attrs = {}
        if axis is not None:
            attrs["axis"] = axis
        if eps is not None:
            attrs["epsilon"] = eps
        norm_shape = xs[a:]

        def oracle(x, scale, bias, norm_shape=norm_shape, eps=eps or 1e-5):
            return F.layer_norm(x, norm_shape, scale, bias, eps)
        add_case(f"layer_norm_{name}", "layer_norm", attrs,
                 [x, randn(*norm_shape), randn(*norm_shape)], oracle)

    for op, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        for name, xs, axis, scale in (("last", (3, 7), None, 1), ("axis0", (5, 4), 0, 1),
                                      ("3d_axis1", (2, 6, 3), 1, 2), ("neg2", (2, 3, 4), -2, 1),
                                      ("1d", (11,), 0, 1), ("large", (2, 5), -1, 300),
                                      ("size1_axis", (4, 1, 3), 1, 1)):
            attrs = {} if axis is None else {"axis": axis}
            add_case(f"{op}_{name}", op, attrs, [randn(*xs, scale=scale)],
                     lambda t, axis=axis, fn=fn: fn(t, -1 if axis is None else axis))
