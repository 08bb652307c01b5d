"""PyTorch cases for kiln's backward ops (ir/ops/grad_ops.cpp), from torch autograd.

Each backward op takes the upstream gradient dy and a saved forward value; the oracle is the
vector-Jacobian product torch.autograd.grad(forward(x), x, dy) in float64, which is what the
op must compute (op(dy, x) for ops that save the input, op(dy, forward(x)) for the result).
"""
import torch
import torch.nn.functional as F

from case_writer import add_case, randint, randn, shape_tag


def vjp(forward, x, dy):
    x = x.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(forward(x), x, dy)
    return grad.detach()


SHAPES = [(7,), (2, 3, 5), (1, 1, 1), ()]


def backward_op_cases():
    # (op, attrs, input maker, forward, saves the result rather than the input)
    gelu_tanh = lambda t: F.gelu(t, approximate="tanh")
    unary = [
        ("relu_grad", {}, randn, F.relu, False),
        ("leaky_relu_grad", {"alpha": 0.2}, randn, lambda t: F.leaky_relu(t, 0.2), False),
        ("sigmoid_grad", {}, lambda *s: randn(*s, scale=3), torch.sigmoid, True),
        ("tanh_grad", {}, lambda *s: randn(*s, scale=2), torch.tanh, True),
        ("gelu_grad", {}, lambda *s: randn(*s, scale=3), F.gelu, False),
        ("abs_grad", {}, randn, torch.abs, False),
        ("clip_grad", {"min": -0.5, "max": 0.75}, randn,
         lambda t: torch.clamp(t, -0.5, 0.75), False),
    ]
    for op, attrs, make, forward, saves_result in unary:
        for shape in SHAPES:
            x, dy = make(*shape), randn(*shape)
            saved = forward(x.double()).float() if saves_result else x
            add_case(f"{op}_{shape_tag(shape)}", op, attrs, [dy, saved],
                     lambda d, s, x=x, forward=forward: vjp(forward, x.double(), d))
    x, dy = randn(4, 9, scale=3), randn(4, 9)
    add_case("gelu_grad_tanh", "gelu_grad", {"approximate": "tanh"}, [dy, x],
             lambda d, s: vjp(gelu_tanh, s, d))
    add_case("leaky_relu_grad_default", "leaky_relu_grad", {}, [dy, x],
             lambda d, s: vjp(F.leaky_relu, s, d))

    for name, shape, axis in (("last", (3, 7), -1), ("axis0", (5, 4), 0),
                              ("mid", (2, 3, 4), 1), ("1d", (6,), 0)):
        x, dy = randn(*shape, scale=2), randn(*shape)
        for op, fn in (("softmax_grad", torch.softmax), ("log_softmax_grad", torch.log_softmax)):
            forward = lambda t, fn=fn, axis=axis: fn(t, axis)
            add_case(f"{op}_{name}", op, {"axis": axis}, [dy, forward(x.double()).float()],
                     lambda d, y, x=x, forward=forward: vjp(forward, x.double(), d))

    for name, n, c in (("4x10", 4, 10), ("1x5", 1, 5), ("13x17", 13, 17)):
        logits, labels = randn(n, c, scale=2), randint(0, c, n, dtype=torch.int64)
        dy = randn()
        add_case(f"softmax_cross_entropy_grad_{name}", "softmax_cross_entropy_grad", {},
                 [dy, logits, labels],
                 lambda d, x, y: vjp(lambda t: F.cross_entropy(t, y), x, d), out_dtype="f32")

    for name, xs, shape in (("row", (5,), [3, 5]), ("col", (3, 1), [3, 4]),
                            ("scalar", (), [2, 3]), ("same", (2, 3), [2, 3])):
        add_case(f"broadcast_to_{name}", "broadcast_to", {"shape": shape}, [randn(*xs)],
                 lambda t, shape=shape: t.expand(shape))
    for factor in (0.5, -2.0, 0.0):
        add_case(f"scale_{str(factor).replace('.', 'p').replace('-', 'm')}", "scale",
                 {"factor": factor}, [randn(3, 4)], lambda t, f=factor: t * f)
