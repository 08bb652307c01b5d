"""PyTorch cases for the ops transformers need beyond the CNN set: the embedding gradient
(gather_elements_grad) and rms_norm with its backward op.

Generated last by gen_cases.py, so that the earlier families' random inputs stay what they were.
torch 1.13 has no F.rms_norm: the oracle writes it out, x * rsqrt(mean(x^2) + eps) * scale, and
torch.autograd differentiates that, in float64.
"""
import torch

from case_writer import add_case, randint, randn
from grad_cases import vjp


def gather_elements_grad_cases():
    """Repeated indices add up, negative ones count from the end (torch.gather wants them
    normalized), dy may be smaller than x off the axis."""
    for name, xs, index_shape, axis, index_dtype, half in (
            ("embedding", (6, 4), (9, 4), 0, torch.int64, False),
            ("axis1_i32", (3, 5), (3, 7), 1, torch.int32, False),
            ("neg_axis_smaller", (4, 6, 3), (2, 8, 3), -2, torch.int64, False),
            ("f16", (5, 3), (8, 3), 0, torch.int64, True)):
        dim = xs[axis]
        index = randint(-dim, dim, *index_shape, dtype=index_dtype)
        dy = randn(*index_shape).half() if half else randn(*index_shape)
        add_case(f"gather_elements_grad_{name}", "gather_elements_grad",
                 {"axis": axis, "shape": list(xs)}, [dy, index],
                 lambda d, i, xs=xs, axis=axis, dim=dim: vjp(
                     lambda t: torch.gather(t, axis, torch.where(i < 0, i + dim, i).long()),
                     torch.zeros(xs, dtype=torch.float64), d))


def rms_norm(x, scale, dims, eps):
    return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * scale


# (name, x shape, axis attribute or None for the default -1, epsilon or None for 1e-5)
RMS_SHAPES = (("last", (4, 7), None, None), ("3d_axis1", (2, 3, 8), 1, None),
              ("3d_neg2", (3, 4, 5), -2, 1e-3), ("all", (3, 5), 0, None),
              ("size1", (5, 1), -1, None), ("offset", (3, 16), -1, 1e-6),
              ("long_rows", (3, 1100), -1, None))


def rms_norm_cases():
    for name, xs, axis, eps in RMS_SHAPES:
        first = (axis if axis is not None else -1) % len(xs)
        dims = tuple(range(first, len(xs)))
        x = randn(*xs) * 3 + (100 if name == "offset" else 0)
        attrs = {k: v for k, v in (("axis", axis), ("epsilon", eps)) if v is not None}
        eps = eps or 1e-5
        scale = randn(*xs[first:])
        add_case(f"rms_norm_{name}", "rms_norm", attrs, [x, scale],
                 lambda x, s, dims=dims, eps=eps: rms_norm(x, s, dims, eps))

        def oracle(dy, x, s, dims=dims, eps=eps):
            x = x.detach().requires_grad_(True)
            (dx,) = torch.autograd.grad(rms_norm(x, s, dims, eps), x, dy)
            return dx.detach(), dy * rms_norm(x.detach(), 1.0, dims, eps)
        add_case(f"rms_norm_grad_{name}", "rms_norm_grad", attrs, [randn(*xs), x, scale], oracle)
    h = lambda *shape: randn(*shape).half()
    add_case("rms_norm_f16", "rms_norm", {}, [h(4, 8), h(8)],
             lambda x, s: rms_norm(x, s, (1,), 1e-5))


def transformer_cases():
    gather_elements_grad_cases()
    rms_norm_cases()
