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

    # f16 operands: the kernels compute in float and round once, on store.
    for op, make, forward, saves_result in (
            ("relu_grad", randn, F.relu, False),
            ("abs_grad", randn, torch.abs, False),
            ("gelu_grad", lambda *s: randn(*s, scale=3), F.gelu, False)):
        x, dy = make(5, 7).half(), randn(5, 7).half()
        saved = forward(x.double()).half() if saves_result else x
        add_case(f"{op}_f16", op, {}, [dy, saved],
                 lambda d, s, x=x, forward=forward: vjp(forward, x.double(), d))
    # Saturated tanh and far tails of gelu: where 1 - y^2 and 1 + tanh(u) would cancel.
    x, dy = randn(64, scale=8), randn(64)
    add_case("tanh_grad_saturated", "tanh_grad", {}, [dy, torch.tanh(x.double()).float()],
             lambda d, y, x=x: vjp(torch.tanh, x.double(), d))
    add_case("gelu_grad_tanh_tails", "gelu_grad", {"approximate": "tanh"}, [dy, x],
             lambda d, s: vjp(gelu_tanh, s, d))

    # "long" rows exceed one warp's share (kMaxWarpRow): one block per row.
    for name, shape, axis in (("last", (3, 7), -1), ("axis0", (5, 4), 0),
                              ("mid", (2, 3, 4), 1), ("1d", (6,), 0), ("long", (3, 1500), -1)):
        x, dy = randn(*shape, scale=2), randn(*shape)
        for op, fn in (("softmax_grad", torch.softmax), ("log_softmax_grad", torch.log_softmax)):
            forward = lambda t, fn=fn, axis=axis: fn(t, axis)
            add_case(f"{op}_{name}", op, {"axis": axis}, [dy, forward(x.double()).float()],
                     lambda d, y, x=x, forward=forward: vjp(forward, x.double(), d))

    for name, n, c, label_dtype in (("4x10", 4, 10, torch.int64), ("1x5", 1, 5, torch.int64),
                                    ("13x17", 13, 17, torch.int64), ("i32", 6, 9, torch.int32),
                                    ("2x1500", 2, 1500, torch.int64)):
        logits, labels = randn(n, c, scale=2), randint(0, c, n, dtype=label_dtype)
        dy = randn()
        add_case(f"softmax_cross_entropy_grad_{name}", "softmax_cross_entropy_grad", {},
                 [dy, logits, labels],
                 lambda d, x, y: vjp(lambda t: F.cross_entropy(t, y.long()), x, d), out_dtype="f32")

    for name, xs, shape in (("row", (5,), [3, 5]), ("col", (3, 1), [3, 4]),
                            ("scalar", (), [2, 3]), ("same", (2, 3), [2, 3])):
        add_case(f"broadcast_to_{name}", "broadcast_to", {"shape": shape}, [randn(*xs)],
                 lambda t, shape=shape: t.expand(shape))
    add_case("broadcast_to_i32", "broadcast_to", {"shape": [4, 3, 5]},
             [randint(-1000, 1000, 3, 1)], lambda t: t.expand(4, 3, 5))

    # slice_grad: (x shape, starts, ends, axes, steps); the oracle slices with Python's rules.
    for name, xs, starts, ends, axes, steps in (
            ("axis1_step2", (5, 7), [1], [-1], [1], [2]), ("two_axes", (4, 3, 6), [-3, 0], [100, 2], [0, 1], [1, 1]),
            ("1d", (9,), [2], [9], [0], [3]), ("neg_axis", (2, 5, 4), [1], [4], [-1], [2])):
        index = [slice(None)] * len(xs)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            index[axis] = slice(start, end, step)
        dy = randn(*randn(*xs)[tuple(index)].shape)
        add_case(f"slice_grad_{name}", "slice_grad",
                 {"shape": list(xs), "starts": starts, "ends": ends, "axes": axes, "steps": steps},
                 [dy], lambda d, xs=xs, index=tuple(index):
                     vjp(lambda t: t[index], torch.zeros(xs, dtype=torch.float64), d))

    # Small integers as floats: many ties, which split the gradient in half.
    ints = lambda *s: randint(-2, 3, *s).float()
    for name, a_shape, b_shape in (("same", (3, 4), (3, 4)), ("bcast", (2, 1, 4), (3, 1)),
                                   ("scalar", (), (5,))):
        a, b = ints(*a_shape), ints(*b_shape)
        for op, fn in (("maximum_share", torch.maximum), ("minimum_share", torch.minimum)):
            add_case(f"{op}_{name}", op, {}, [a, b],
                     lambda x, y, fn=fn: vjp(lambda t: fn(t, y.expand_as(t)),
                                             x.expand(torch.broadcast_shapes(x.shape, y.shape)).contiguous(),
                                             torch.ones(torch.broadcast_shapes(x.shape, y.shape),
                                                        dtype=torch.float64)))
    nan = torch.tensor([float("nan"), 1.0, 2.0, float("nan")])
    other = torch.tensor([1.0, float("nan"), 2.0, float("nan")])
    for op, fn in (("maximum_share", torch.maximum), ("minimum_share", torch.minimum)):
        add_case(f"{op}_nan", op, {}, [nan, other],
                 lambda x, y, fn=fn: vjp(lambda t: fn(t, y), x, torch.ones(4, dtype=torch.float64)))

    for factor in (0.5, -2.0, 0.0):
        add_case(f"scale_{str(factor).replace('.', 'p').replace('-', 'm')}", "scale",
                 {"factor": factor}, [randn(3, 4)], lambda t, f=factor: t * f)
