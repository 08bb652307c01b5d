"""PyTorch cases for the window backward ops (ir/ops/nn_grad_ops.cpp), from torch autograd.

The oracle is the vector-Jacobian product of the forward op in float64, as in grad_cases.py.
conv2d is linear in each operand, so its gradients are taken at zeros of the other operand's
shape; max pooling's at the saved input x. Asymmetric padding goes through F.pad (with -inf for
max pooling), as in nn_cases.py; the pad's own backward drops the padding's gradient.
"""
import math

import torch
import torch.nn.functional as F

from case_writer import add_case, randint, randn
from grad_cases import vjp
from nn_cases import torch_pad

# (name, x shape, weight shape, stride, pad, dilation, groups): the forward sweep's variety.
CONV_SPECS = [
    ("basic", (1, 1, 5, 5), (1, 1, 3, 3), [1, 1], [0, 0, 0, 0], [1, 1], 1),
    ("pad_same", (2, 3, 8, 8), (5, 3, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),
    ("stride_2", (2, 2, 9, 11), (3, 2, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 1),
    ("stride_2x3", (1, 2, 13, 13), (3, 2, 3, 2), [2, 3], [0, 0, 0, 0], [1, 1], 1),
    ("stride_gt_kernel", (1, 2, 10, 10), (2, 2, 2, 2), [3, 3], [0, 0, 0, 0], [1, 1], 1),
    ("pad_asym", (1, 2, 6, 7), (3, 2, 3, 3), [1, 1], [1, 0, 2, 1], [1, 1], 1),
    ("pad_asym_stride", (2, 3, 10, 9), (2, 3, 4, 4), [2, 2], [0, 1, 1, 2], [1, 1], 1),
    ("dilation_2", (1, 2, 11, 11), (2, 2, 3, 3), [1, 1], [0, 0, 0, 0], [2, 2], 1),
    ("dilation_stride_pad", (2, 1, 17, 15), (2, 1, 3, 3), [2, 2], [1, 1, 1, 1], [3, 2], 1),
    ("groups_3", (2, 6, 7, 7), (9, 2, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 3),
    ("groups_2_asym", (1, 4, 8, 5), (6, 2, 3, 1), [1, 2], [0, 1, 2, 0], [1, 1], 2),
    ("depthwise", (2, 5, 9, 9), (5, 1, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 5),
    ("depthwise_mult_2", (1, 3, 8, 10), (6, 1, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 3),
    ("pointwise", (3, 7, 5, 3), (11, 7, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),
    ("kernel_equals_input", (2, 3, 5, 5), (4, 3, 5, 5), [1, 1], [0, 0, 0, 0], [1, 1], 1),
    ("lenet_like", (4, 8, 12, 12), (16, 8, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),
]

# (name, x shape, kernel, stride or None, pad, dilation)
POOL_SPECS = [
    ("k2", (2, 2, 6, 6), [2, 2], None, [0, 0, 0, 0], [1, 1]),
    ("k3_s1_p1", (2, 3, 7, 7), [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
    ("k3_s2_p1", (1, 2, 9, 11), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
    ("odd_k2", (1, 1, 7, 5), [2, 2], None, [0, 0, 0, 0], [1, 1]),
    ("rect", (2, 1, 8, 9), [3, 2], [1, 2], [0, 1, 0, 1], [1, 1]),
    ("asym_pad", (1, 2, 6, 7), [3, 3], [2, 2], [1, 0, 0, 1], [1, 1]),
    ("asym_pad_2", (1, 1, 5, 5), [4, 4], [1, 1], [2, 1, 0, 2], [1, 1]),
    ("stride_gt_kernel", (1, 2, 9, 9), [2, 2], [3, 3], [0, 0, 0, 0], [1, 1]),
    ("global_like", (2, 2, 5, 5), [5, 5], None, [0, 0, 0, 0], [1, 1]),
    ("k2_pad", (1, 2, 7, 6), [2, 2], None, [1, 0, 0, 1], [1, 1]),
]
POOL_DILATED = [("dilation_2", (1, 2, 9, 9), [3, 3], [1, 1], [1, 1, 1, 1], [2, 2]),
                ("dilation_2x1_asym", (1, 1, 10, 8), [2, 3], [2, 1], [0, 1, 1, 0], [2, 1]),
                ("dilation_2_s4", (1, 2, 11, 10), [2, 2], [4, 4], [1, 0, 0, 1], [2, 2])]


def conv_grad_cases():
    for name, xs, ws, stride, pad, dilation, groups in CONV_SPECS:
        def conv(x, w, stride=stride, pad=pad, dilation=dilation, groups=groups):
            return F.conv2d(F.pad(x, torch_pad(pad)), w, None, stride, 0, dilation, groups)
        x, w = randn(*xs), randn(*ws, scale=0.5)
        dy = randn(*conv(x, w).shape)
        attrs = {"stride": stride, "pad": pad, "dilation": dilation, "groups": groups}
        add_case(f"conv2d_grad_input_{name}", "conv2d_grad_input", dict(attrs, shape=list(xs)),
                 [dy, w], lambda d, w, xs=xs, conv=conv:
                     vjp(lambda t: conv(t, w), torch.zeros(xs, dtype=torch.float64), d))
        add_case(f"conv2d_grad_weight_{name}", "conv2d_grad_weight", dict(attrs, shape=list(ws)),
                 [dy, x], lambda d, x, ws=ws, conv=conv:
                     vjp(lambda t: conv(x, t), torch.zeros(ws, dtype=torch.float64), d))
    # Defaults filled by inference; f16 operands (float accumulation, one rounding).
    x, w = randn(1, 2, 4, 5), randn(3, 2, 2, 2)
    dy = randn(1, 3, 3, 4)
    add_case("conv2d_grad_input_defaults", "conv2d_grad_input", {"shape": [1, 2, 4, 5]}, [dy, w],
             lambda d, w: vjp(lambda t: F.conv2d(t, w), torch.zeros(1, 2, 4, 5, dtype=torch.float64), d))
    add_case("conv2d_grad_weight_f16", "conv2d_grad_weight", {"shape": [3, 2, 2, 2]},
             [dy.half(), x.half()],
             lambda d, x: vjp(lambda t: F.conv2d(x, t), torch.zeros(3, 2, 2, 2, dtype=torch.float64), d))


def pool_grad_cases():
    for name, xs, kernel, stride, pad, dilation in POOL_SPECS + POOL_DILATED:
        s = stride or kernel
        attrs = {"kernel": kernel, "pad": pad}
        if stride is not None:
            attrs["stride"] = stride

        def max_pool(t, kernel=kernel, s=s, pad=pad, dilation=dilation):
            return F.max_pool2d(F.pad(t, torch_pad(pad), value=-math.inf), kernel, s, 0, dilation)
        # Small integers: many ties inside a window, which must all go to the first maximum.
        for tag, x in (("", randn(*xs)), ("_ties", randint(-2, 3, *xs).float())):
            dy = randn(*max_pool(x).shape)
            add_case(f"max_pool2d_grad_{name}{tag}", "max_pool2d_grad",
                     dict(attrs, dilation=dilation), [dy, x],
                     lambda d, x, f=max_pool: vjp(f, x, d))
        if dilation != [1, 1]:
            continue  # avg_pool2d has no dilation
        for include in (True, False):
            def avg_pool(t, kernel=kernel, s=s, pad=pad, include=include):
                total = F.avg_pool2d(F.pad(t, torch_pad(pad)), kernel, s)
                if include:
                    return total
                ones = torch.ones_like(t)
                return total / F.avg_pool2d(F.pad(ones, torch_pad(pad)), kernel, s).detach()
            dy = randn(*avg_pool(randn(*xs)).shape)
            tag = "incl" if include else "excl"
            add_case(f"avg_pool2d_grad_{name}_{tag}", "avg_pool2d_grad",
                     dict(attrs, shape=list(xs), count_include_pad=include), [dy],
                     lambda d, xs=xs, f=avg_pool: vjp(f, torch.zeros(xs, dtype=torch.float64), d))
    x = randn(2, 3, 6, 6).half()
    dy = randn(2, 3, 3, 3).half()
    add_case("max_pool2d_grad_f16", "max_pool2d_grad", {"kernel": [2, 2]}, [dy, x],
             lambda d, x: vjp(lambda t: F.max_pool2d(t, 2), x, d))
    # Symmetric padding through torch's own padding: checks the F.pad formulation above.
    x, dy = randn(1, 2, 7, 7), randn(1, 2, 4, 4)
    add_case("avg_pool2d_grad_native_pad", "avg_pool2d_grad",
             {"shape": [1, 2, 7, 7], "kernel": [3, 3], "stride": [2, 2], "pad": [1, 1, 1, 1],
              "count_include_pad": False}, [dy],
             lambda d: vjp(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
                           torch.zeros(1, 2, 7, 7, dtype=torch.float64), d))


def conv_pool_grad_cases():
    conv_grad_cases()
    pool_grad_cases()
