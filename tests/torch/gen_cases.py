#!/usr/bin/python3
"""Writes the PyTorch differential-test cases for kiln's reference interpreter.

Usage: /usr/bin/python3 tests/torch/gen_cases.py --out DIR

For every op in docs/ops.md, a sweep of one-op cases: odd and prime sizes, size-1 dims,
broadcasting, negative axes, padding and the other attributes. Each case is written as
DIR/<name>.in<i>.npy (float inputs as f32; labels and integer inputs as i32/i64; bool as bool),
DIR/<name>.out.npy (the expected result) and one entry of DIR/cases.json:
  {"name": ..., "op": ..., "attrs": {...}, "inputs": [...], "expected": "<name>.out.npy"}
(a multi-result op lists its results: "expected": ["<name>.out.npy", "<name>.out1.npy", ...]).
tests/torch/torch_diff_test.cpp builds each case as a one-node graph and compares.

The oracle: PyTorch evaluates each op IN FLOAT64 on the same f32 inputs, and the answer is
rounded once to the result dtype. That is exactly what the interpreter does (read as double,
compute in double, round once), so a correct kernel agrees to about an ulp, and a tight
tolerance can tell a real bug from float32 rounding noise. Comparing against float32 PyTorch
would leave us comparing two different rounding paths and force a loose tolerance.

The neural-network cases live in nn_cases.py, the optimizer steps in optimizer_cases.py;
case_writer.py writes the files.
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # importing the sibling modules must not leave __pycache__ here
import case_writer
from case_writer import TORCH_DTYPES, add_case, kiln_dtype, positive, randint, randn, shape_tag
from grad_cases import backward_op_cases, vjp
from nn_cases import conv_cases, matmul_cases, norm_cases, pool_cases
from norm_train_cases import norm_train_cases
from conv_pool_grad_cases import conv_pool_grad_cases
from optimizer_cases import optimizer_cases
from transformer_cases import transformer_cases
from sparse_cases import expand_two_four_cases


# --- elementwise --------------------------------------------------------------------------------

BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "maximum": torch.maximum, "minimum": torch.minimum}
BINARY_SHAPES = [((3, 5), (3, 5)), ((2, 3, 4), (4,)), ((4, 1, 3), (1, 5, 1)), ((7,), ()),
                 ((), ()), ((1,), (2, 3)), ((2, 1, 3, 1), (5, 1, 4)), ((1, 1, 1), (1, 1, 1))]


def elementwise_cases():
    for op, fn in BINARY.items():
        for sa, sb in BINARY_SHAPES:
            a = randn(*sa)
            # Divisors away from 0 so the quotient is well conditioned.
            b = (torch.rand(sb) + 0.5) * torch.sign(randn(*sb)) if op == "div" else randn(*sb)
            add_case(f"{op}_{shape_tag(sa, sb)}", op, {}, [a, b], fn)
        # maximum/minimum on ties, both orders
        if op in ("maximum", "minimum"):
            a = torch.tensor([1.0, -2.0, 3.0, 0.0])
            add_case(f"{op}_ties", op, {}, [a, a.clone()], fn)
    # Integer arithmetic; div truncates toward zero (C++/CUDA semantics).
    for dtype in (torch.int32, torch.int64):
        tag = kiln_dtype(torch.empty(0, dtype=dtype))
        a = randint(-50, 50, 3, 4, dtype=dtype)
        b = randint(1, 9, 4, dtype=dtype) * torch.tensor([1, -1, 1, -1], dtype=dtype)
        add_case(f"div_{tag}_trunc", "div", {}, [a, b],
                 lambda x, y: torch.div(x, y, rounding_mode="trunc"))
        for op in ("add", "sub", "mul", "maximum", "minimum"):
            add_case(f"{op}_{tag}", op, {}, [a, b], BINARY[op])
    # Bit shifts on u8 (the one unsigned type PyTorch 1.13 computes with): bits shifted out are
    # lost, a shift by 8 or more gives 0; the shifts broadcast along the last dim.
    bits = randint(0, 256, 3, 5, dtype=torch.uint8)
    shifts = torch.tensor([0, 1, 7, 8, 9], dtype=torch.uint8)
    add_case("bit_shift_left_u8", "bit_shift", {"direction": "left"}, [bits, shifts], torch.bitwise_left_shift)
    add_case("bit_shift_right_u8", "bit_shift", {"direction": "right"}, [bits, shifts], torch.bitwise_right_shift)

    unary_shapes = [(7,), (2, 3, 5), (1, 1, 1), ()]
    unary = {
        "relu": (randn, {}, F.relu),
        "sigmoid": (lambda *s: randn(*s, scale=4), {}, torch.sigmoid),
        "tanh": (lambda *s: randn(*s, scale=2), {}, torch.tanh),
        "exp": (lambda *s: randn(*s, scale=3), {}, torch.exp),
        "log": (positive, {}, torch.log),
        "sqrt": (positive, {}, torch.sqrt),
        "rsqrt": (positive, {}, torch.rsqrt),
        "neg": (randn, {}, torch.neg),
        "abs": (randn, {}, torch.abs),
        "gelu": (lambda *s: randn(*s, scale=3), {}, F.gelu),
    }
    for op, (make, attrs, fn) in unary.items():
        for shape in unary_shapes:
            add_case(f"{op}_{shape_tag(shape)}", op, attrs, [make(*shape)], fn)
    x = randn(4, 9, scale=3)
    add_case("gelu_tanh", "gelu", {"approximate": "tanh"}, [x],
             lambda t: F.gelu(t, approximate="tanh"))
    add_case("gelu_tanh_scalar", "gelu", {"approximate": "tanh"}, [randn()],
             lambda t: F.gelu(t, approximate="tanh"))
    add_case("gelu_none_explicit", "gelu", {"approximate": "none"}, [x], F.gelu)
    for alpha in (None, 0.2, 1.5):
        attrs = {} if alpha is None else {"alpha": alpha}
        add_case(f"leaky_relu_{alpha or 'default'}".replace(".", "p"), "leaky_relu", attrs,
                 [randn(3, 7)], lambda t: F.leaky_relu(t, alpha or 0.01))
    add_case("leaky_relu_int_alpha", "leaky_relu", {"alpha": 2}, [randn(5)],
             lambda t: F.leaky_relu(t, 2.0))
    for exponent in (2, 3, 0.5, -1.5, 2.7, 0):
        tag = str(exponent).replace(".", "p").replace("-", "m")
        add_case(f"pow_positive_{tag}", "pow", {"exponent": exponent}, [positive(2, 5)],
                 lambda t: torch.pow(t, float(exponent)))
    for exponent in (2, 3):  # integer exponents are defined for negative bases
        add_case(f"pow_signed_{exponent}", "pow", {"exponent": exponent}, [randn(6)],
                 lambda t: torch.pow(t, exponent))
    for dtype in (torch.int32, torch.int64):
        tag = kiln_dtype(torch.empty(0, dtype=dtype))
        add_case(f"neg_{tag}", "neg", {}, [randint(-100, 100, 11, dtype=dtype)], torch.neg)
        add_case(f"abs_{tag}", "abs", {}, [randint(-100, 100, 3, 3, dtype=dtype)], torch.abs)
        add_case(f"clip_{tag}", "clip", {"min": -20, "max": 30},
                 [randint(-100, 100, 13, dtype=dtype)], lambda t: torch.clamp(t, -20, 30))
    for tag, attrs in (("both", {"min": -0.5, "max": 0.75}), ("min_only", {"min": -0.25}),
                       ("max_only", {"max": 0.1}), ("none", {}),
                       ("equal", {"min": 0.3, "max": 0.3})):
        # The defaults are -inf and inf (JSON has no infinity; "none" leaves both out).
        add_case(f"clip_{tag}", "clip", attrs, [randn(4, 6)],
                 lambda t: torch.clamp(t, attrs.get("min", -math.inf), attrs.get("max", math.inf)))

    floats = randn(3, 8, scale=10)
    floats[0, :3] = torch.tensor([0.0, -0.0, 2.0])
    floats[1, :4] = torch.tensor([-2.5, 2.5, -0.999, 0.999])
    for to in ("i32", "i64", "bool", "f16", "f32"):
        add_case(f"cast_f32_to_{to}", "cast", {"to": to}, [floats],
                 lambda t: t.to(TORCH_DTYPES[to]), out_dtype=to)
    ints = randint(-1000, 1000, 17, dtype=torch.int64)
    ints[3] = 0
    for to in ("f32", "i32", "bool"):
        add_case(f"cast_i64_to_{to}", "cast", {"to": to}, [ints],
                 lambda t: t.to(TORCH_DTYPES[to]), out_dtype=to)
    add_case("cast_i32_to_i64", "cast", {"to": "i64"}, [randint(-9, 9, 2, 3)],
             lambda t: t.long(), out_dtype="i64")
    add_case("cast_bool_to_f32", "cast", {"to": "f32"}, [randn(9) > 0],
             lambda t: t.float(), out_dtype="f32")
    add_case("cast_f16_to_f32", "cast", {"to": "f32"}, [randn(2, 5).half()],
             lambda t: t.float(), out_dtype="f32")

    for tag, attrs in (("default", {}), ("rate_0p3", {"rate": 0.3}),
                       ("inference_explicit", {"rate": 0.9, "training": False})):
        add_case(f"dropout_{tag}", "dropout", attrs, [randn(2, 3, 4)], lambda t: t)


# --- shape ops, reductions, losses -------------------------------------------------------------

def shape_cases():
    for name, xs, shape in (("flat", (2, 3, 4), [24]), ("infer", (2, 3, 4), [4, -1]),
                            ("infer_first", (6, 5), [-1, 3, 2]), ("add_ones", (3, 5), [1, 3, 1, 5]),
                            ("to_scalar", (1, 1), []), ("from_scalar", (), [1, 1, 1])):
        add_case(f"reshape_{name}", "reshape", {"shape": shape}, [randn(*xs)],
                 lambda t, shape=shape: t.reshape(shape))
    add_case("reshape_i64", "reshape", {"shape": [3, 2]}, [randint(-5, 5, 6, dtype=torch.int64)],
             lambda t: t.reshape(3, 2))
    for name, xs, axis in (("default", (2, 3, 4), None), ("axis0", (2, 3, 4), 0),
                           ("axis2", (2, 3, 4, 5), 2), ("axis_rank", (2, 3, 4), 3),
                           ("2d", (5, 7), 1)):
        a = 1 if axis is None else axis
        attrs = {} if axis is None else {"axis": axis}
        add_case(f"flatten_{name}", "flatten", attrs, [randn(*xs)],
                 lambda t, a=a: t.reshape(math.prod(t.shape[:a]), math.prod(t.shape[a:])))
    for name, xs, perm in (("default_2d", (3, 5), None), ("default_4d", (2, 3, 4, 5), None),
                           ("nchw_to_nhwc", (2, 3, 4, 5), [0, 2, 3, 1]),
                           ("identity", (3, 4), [0, 1]), ("3d", (2, 3, 4), [1, 2, 0]),
                           ("rank1", (7,), [0])):
        attrs = {} if perm is None else {"perm": perm}
        add_case(f"transpose_{name}", "transpose", attrs, [randn(*xs)],
                 lambda t, perm=perm: t.permute(perm or list(reversed(range(t.dim())))))
    for name, shapes, axis in (("axis0", [(2, 3), (4, 3)], 0), ("axis1", [(2, 3), (2, 5)], 1),
                               ("neg", [(2, 3, 1), (2, 3, 4), (2, 3, 2)], -1),
                               ("single", [(3, 4)], 1), ("mid", [(2, 1, 3), (2, 5, 3)], 1),
                               ("1d", [(3,), (1,), (4,)], 0)):
        add_case(f"concat_{name}", "concat", {"axis": axis}, [randn(*s) for s in shapes],
                 lambda *ts, axis=axis: torch.cat(ts, axis))
    add_case("concat_i32", "concat", {"axis": 0}, [randint(0, 9, 2, 2), randint(0, 9, 1, 2)],
             lambda *ts: torch.cat(ts, 0))
    big = 2**62
    for name, xs, starts, ends, axes, steps in (
            ("basic", (10,), [2], [7], None, None),
            ("step2", (11,), [1], [10], None, [2]),
            ("step3_2d", (7, 9), [0, 1], [7, 9], None, [3, 2]),
            ("negative", (10, 6), [-4], [-1], [0], None),
            ("clamped", (5, 8), [-100, 2], [100, big], None, None),
            ("end_int64_max", (6,), [1], [2**63 - 1], None, [2]),
            ("axes_subset", (3, 4, 5), [1], [3], [2], None),
            ("axes_neg", (3, 4, 5), [1, 0], [4, 2], [-2, 0], [2, 1]),
            ("start_clamped_end", (4, 6), [3], [10], [1], [5]),
            ("one_element", (5, 5), [4, -1], [5, 5], None, None),
            ("full", (2, 3), [0], [3], [1], [1])):
        attrs = {"starts": starts, "ends": ends}
        if axes is not None:
            attrs["axes"] = axes
        if steps is not None:
            attrs["steps"] = steps

        def oracle(t, starts=starts, ends=ends, axes=axes, steps=steps):
            index = [slice(None)] * t.dim()
            for i, axis in enumerate(axes if axes is not None else range(len(starts))):
                index[axis] = slice(starts[i], ends[i], steps[i] if steps else 1)
            return t[tuple(index)]
        add_case(f"slice_{name}", "slice", attrs, [randn(*xs)], oracle)


def reduce_cases():
    torch_fns = {"reduce_sum": torch.sum, "reduce_mean": torch.mean, "reduce_max": torch.amax}
    specs = [("all", (3, 4), None, False), ("all_keep", (2, 3, 4), [], True),
             ("axis0", (5, 3), [0], False), ("last_keep", (2, 3, 7), [-1], True),
             ("two_axes", (2, 3, 4, 5), [0, 2], False),
             ("two_axes_keep", (2, 3, 4, 5), [1, -1], True),
             ("1d", (13,), [0], False), ("size1_axis", (4, 1, 3), [1], False)]
    for op, fn in torch_fns.items():
        for name, xs, axes, keep in specs:
            attrs = {}
            if axes is not None:
                attrs["axes"] = axes
            if keep:
                attrs["keepdims"] = True

            def oracle(t, axes=axes, keep=keep, fn=fn):
                dims = list(axes) if axes else list(range(t.dim()))
                return fn(t, dim=dims, keepdim=keep)
            add_case(f"{op}_{name}", op, attrs, [randn(*xs)], oracle)
    for dtype in (torch.int32, torch.int64):
        tag = kiln_dtype(torch.empty(0, dtype=dtype))
        x = randint(-100, 100, 3, 5, dtype=dtype)
        add_case(f"reduce_sum_{tag}", "reduce_sum", {"axes": [1]}, [x], lambda t: t.sum(1))
        add_case(f"reduce_max_{tag}", "reduce_max", {"axes": [0], "keepdims": True}, [x],
                 lambda t: t.amax(0, keepdim=True))
    # pairwise_sum: torch.sum over dim 0 (kiln adds the rows in its own fixed tree; the result
    # is the same sum within the tolerance of a float accumulation).
    for name, xs in (("rows16", (16, 3, 4)), ("rows6", (6, 5)), ("rows1", (1, 7)),
                     ("rows13_1d", (13,))):
        add_case(f"pairwise_sum_{name}", "pairwise_sum", {}, [randn(*xs)], lambda t: t.sum(0))


def loss_cases():
    for name, n, c, dtype, scale in (("i64", 4, 10, torch.int64, 1), ("i32", 4, 10, torch.int32, 1),
                                     ("n1", 1, 5, torch.int64, 1), ("c1", 3, 1, torch.int32, 1),
                                     ("large_logits", 6, 7, torch.int64, 100),
                                     ("primes", 13, 17, torch.int32, 3)):
        labels = torch.randint(0, c, (n,), dtype=dtype)
        add_case(f"softmax_cross_entropy_{name}", "softmax_cross_entropy", {},
                 [randn(n, c, scale=scale), labels], lambda x, y: F.cross_entropy(x, y.long()))
    for xs in ((7,), (3, 4), (2, 3, 5), ()):
        add_case(f"mse_loss_{shape_tag(xs)}", "mse_loss", {}, [randn(*xs), randn(*xs)],
                 F.mse_loss)


def f16_cases():
    """A few ops on f16: operands widen to double and the answer rounds once to f16."""
    h = lambda *shape: randn(*shape).half()
    add_case("add_f16", "add", {}, [h(3, 4), h(4)], torch.add)
    add_case("relu_f16", "relu", {}, [h(9)], F.relu)
    add_case("gelu_f16", "gelu", {"approximate": "tanh"}, [h(2, 5)],
             lambda t: F.gelu(t, approximate="tanh"))
    add_case("softmax_f16", "softmax", {}, [h(3, 6)], lambda t: torch.softmax(t, -1))
    add_case("matmul_f16", "matmul", {}, [h(2, 3, 8), h(8, 5)], torch.matmul)
    add_case("conv2d_f16", "conv2d", {"pad": [1, 1, 1, 1]}, [h(1, 2, 5, 5), h(3, 2, 3, 3)],
             lambda x, w: F.conv2d(x, w, padding=1))
    add_case("layer_norm_f16", "layer_norm", {}, [h(4, 8), h(8), h(8)],
             lambda x, s, b: F.layer_norm(x, (8,), s, b))
    add_case("reduce_sum_f16", "reduce_sum", {"axes": [1]}, [h(3, 16)], lambda t: t.sum(1))
    add_case("pairwise_sum_f16", "pairwise_sum", {}, [h(12, 5)], lambda t: t.sum(0))
    add_case("avg_pool2d_f16", "avg_pool2d", {"kernel": [2, 2]}, [h(1, 2, 4, 6)],
             lambda t: F.avg_pool2d(t, 2))


def activation_row_cases():
    """The activations added as rows of scalar expressions (ir/ops.def), forward and backward.

    Generated last, so that the random inputs of every earlier case stay what they were."""
    unary = {
        "silu": (lambda *s: randn(*s, scale=3), {}, F.silu),
        "softplus": (lambda *s: randn(*s, scale=6), {}, F.softplus),
        "mish": (lambda *s: randn(*s, scale=3), {}, F.mish),
        "hard_swish": (lambda *s: randn(*s, scale=4), {}, F.hardswish),
        "hard_sigmoid": (lambda *s: randn(*s, scale=4), {}, F.hardsigmoid),
        "elu": (lambda *s: randn(*s, scale=3), {"alpha": 0.7}, lambda t: F.elu(t, 0.7)),
        "selu": (lambda *s: randn(*s, scale=3), {}, F.selu),
        "erf": (lambda *s: randn(*s, scale=2), {}, torch.erf),
    }
    for op, (make, attrs, fn) in unary.items():
        for shape in [(7,), (2, 3, 5), (1, 1, 1), ()]:
            add_case(f"{op}_{shape_tag(shape)}", op, attrs, [make(*shape)], fn)
            x, dy = make(*shape), randn(*shape)
            add_case(f"{op}_grad_{shape_tag(shape)}", op + "_grad", attrs, [dy, x],
                     lambda d, s, x=x, fn=fn: vjp(fn, x.double(), d))


def compare_index_cases():
    """Comparisons, logic, where, the float predicates, the trigonometric and rounding rows,
    power, mod, the arg reductions and gather_elements.

    Generated after every earlier family, so that their random inputs stay what they were."""
    compare = {"equal": torch.eq, "less": torch.lt, "less_equal": torch.le,
               "greater": torch.gt, "greater_equal": torch.ge}
    for op, fn in compare.items():
        a, b = randn(3, 4), randn(4)
        b[1] = a[0, 1]  # a tie
        add_case(f"{op}_f32_bcast", op, {}, [a, b], fn, out_dtype="bool")
        add_case(f"{op}_i64", op, {}, [randint(-3, 3, 2, 5, dtype=torch.int64),
                                       randint(-3, 3, 5, dtype=torch.int64)], fn, out_dtype="bool")
    p, q = randn(2, 3, 4) > 0, randn(3, 1) > 0
    for op, fn in (("logical_and", torch.logical_and), ("logical_or", torch.logical_or),
                   ("logical_xor", torch.logical_xor)):
        add_case(f"{op}_bcast", op, {}, [p, q], fn)
    add_case("logical_not", "logical_not", {}, [p], torch.logical_not)
    add_case("where_f32_bcast", "where", {}, [randn(3, 1) > 0, randn(3, 4), randn(4)],
             torch.where, out_dtype="f32")
    add_case("where_i32", "where", {}, [randn(6) > 0, randint(-9, 9, 6), randint(-9, 9, 1)],
             torch.where, out_dtype="i32")
    special = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -2.5, 3.0])
    add_case("is_nan", "is_nan", {}, [special], torch.isnan, out_dtype="bool")
    add_case("is_inf", "is_inf", {}, [special], torch.isinf, out_dtype="bool")
    add_case("is_inf_positive", "is_inf", {"detect_negative": False}, [special], torch.isposinf,
             out_dtype="bool")
    add_case("is_inf_negative", "is_inf", {"detect_positive": False}, [special], torch.isneginf,
             out_dtype="bool")

    unit = lambda *s: torch.rand(s) * 1.8 - 0.9  # inside (-1, 1)
    above_one = lambda *s: torch.rand(s) * 5 + 1.05
    wide = lambda *s: randn(*s, scale=3)
    math_rows = {"sin": (wide, torch.sin), "cos": (wide, torch.cos), "tan": (unit, torch.tan),
                 "asin": (unit, torch.asin), "acos": (unit, torch.acos), "atan": (wide, torch.atan),
                 "sinh": (wide, torch.sinh), "cosh": (wide, torch.cosh),
                 "asinh": (wide, torch.asinh), "acosh": (above_one, torch.acosh),
                 "atanh": (unit, torch.atanh), "floor": (wide, torch.floor),
                 "ceil": (wide, torch.ceil), "sign": (wide, torch.sign)}
    for op, (make, fn) in math_rows.items():
        for shape in [(7,), (2, 3, 5), ()]:
            add_case(f"{op}_{shape_tag(shape)}", op, {}, [make(*shape)], fn)
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 3.7, -3.7])
    add_case("round_halves_to_even", "round", {}, [halves], torch.round)

    add_case("power_bcast", "power", {}, [positive(3, 4), randn(4)], torch.pow)
    add_case("power_signed_integral", "power", {},
             [randn(6), torch.tensor([0.0, 1.0, 2.0, 3.0, -1.0, -2.0])], torch.pow)
    for dtype in (torch.int32, torch.int64):
        tag = kiln_dtype(torch.empty(0, dtype=dtype))
        a = randint(-50, 50, 3, 4, dtype=dtype)
        b = randint(1, 9, 4, dtype=dtype) * torch.tensor([1, -1, 1, -1], dtype=dtype)
        add_case(f"mod_{tag}", "mod", {}, [a, b], torch.remainder)
        add_case(f"mod_{tag}_fmod", "mod", {"fmod": True}, [a, b], torch.fmod)
    add_case("mod_f32_fmod", "mod", {"fmod": True}, [randn(3, 4, scale=5), positive(4)], torch.fmod)
    add_case("mod_f32_python", "mod", {}, [randn(3, 4, scale=5), randn(4) + 3.0],
             torch.remainder)

    x = randn(3, 4, 5)
    for op, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        for axis in (0, 1, -1):
            for keep in (True, False):
                add_case(f"{op}_axis{axis}_keep{int(keep)}".replace("-", "m"), op,
                         {"axis": axis, "keepdims": keep}, [x],
                         lambda t, axis=axis, keep=keep, fn=fn: fn(t, dim=axis, keepdim=keep),
                         out_dtype="i64")
    for axis in (0, 1, -1):
        index = randint(-3, 3, 2, 4, 5, dtype=torch.int64) if axis == 0 else \
            randint(0, 4, 3, 2, 5, dtype=torch.int64) if axis == 1 else \
            randint(-5, 5, 3, 4, 3, dtype=torch.int64)
        dim = x.shape[axis]
        add_case(f"gather_elements_axis{axis}".replace("-", "m"), "gather_elements",
                 {"axis": axis}, [x, index],
                 lambda t, i, axis=axis, dim=dim: torch.gather(t, axis, torch.where(i < 0, i + dim, i)))
    # gather: torch.index_select for a vector of indices, embedding lookups (a [B, T] index into
    # a table's rows, torch.nn.functional.embedding) and a negative axis with negative indices.
    add_case("gather_axis1_vector", "gather", {"axis": 1}, [x, torch.tensor([3, 0, 0, 2], dtype=torch.int32)],
             lambda t, i: torch.index_select(t, 1, i.long()))
    table = randn(11, 6)
    tokens = randint(0, 11, 2, 7, dtype=torch.int64)
    add_case("gather_embedding", "gather", {}, [table, tokens],
             lambda t, i: torch.nn.functional.embedding(i, t))
    add_case("gather_embedding_i32", "gather", {"axis": 0}, [table, tokens.int()],
             lambda t, i: torch.nn.functional.embedding(i.long(), t))
    add_case("gather_axism1_negative", "gather", {"axis": -1}, [x, torch.tensor([[-1, 0], [2, -5]])],
             lambda t, i: t[..., torch.where(i < 0, i + t.shape[-1], i)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for cases.json and .npy files")
    case_writer.start(parser.parse_args().out)
    torch.manual_seed(0)
    for generate in (elementwise_cases, conv_cases, matmul_cases, pool_cases, norm_cases,
                     shape_cases, reduce_cases, loss_cases, f16_cases, optimizer_cases,
                     backward_op_cases, norm_train_cases, conv_pool_grad_cases, activation_row_cases,
                     compare_index_cases, transformer_cases, expand_two_four_cases):
        generate()
    count = case_writer.finish()
    print(f"wrote {count} cases to {case_writer.OUT_DIR}", file=sys.stderr)


if __name__ == "__main__":
    main()
