"""PyTorch cases for the ops transformers need beyond the CNN set: the embedding gradient
(gather_elements_grad), rms_norm with its backward op, and attention with its backward op.

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


def attention_reference(q, k, v, mask=None, scale=0.0, causal=False):
    """softmax(scale q k^T + mask) v and each row's logsumexp, written out (torch 1.13 has no
    F.scaled_dot_product_attention); causal masks keys after the query (top-left diagonal)."""
    scale = scale or q.shape[-1] ** -0.5
    s = scale * q @ k.transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


# (name, q, k, v shapes, mask: None, "pad" (bool [B,1,1,Sk]) or "bias" (f32 [Sq,Sk]), scale,
# causal). Sizes cross the kernels' 32-key tiles, 8-row blocks and 32-feature lanes.
ATTENTION_SHAPES = (
    ("basic", (2, 4, 6, 8), (2, 4, 9, 8), (2, 4, 9, 5), None, 0.0, False),
    ("causal_tiles", (1, 2, 40, 16), (1, 2, 40, 16), (1, 2, 40, 16), None, 0.0, True),
    ("padding_mask", (2, 3, 7, 12), (2, 3, 35, 12), (2, 3, 35, 12), "pad", 0.25, False),
    ("additive_mask", (2, 5, 9), (2, 5, 9), (2, 5, 9), "bias", 0.0, False),
    ("wide_heads", (1, 3, 11, 40), (1, 3, 70, 40), (1, 3, 70, 33), None, 0.0, False),
    ("causal_rectangular", (2, 1, 12, 8), (2, 1, 20, 8), (2, 1, 20, 8), "pad", 0.0, True))


def attention_cases():
    for name, qs, ks, vs, mask_kind, scale, causal in ATTENTION_SHAPES:
        q, k, v = randn(*qs), randn(*ks), randn(*vs)
        inputs = [q, k, v]
        if mask_kind == "pad":
            mask = torch.ones(qs[0], *([1] * (len(qs) - 2)), ks[-2], dtype=torch.bool)
            mask[-1, ..., ks[-2] // 2:] = False  # the last sequence is padded to twice its length
            inputs.append(mask)
        elif mask_kind == "bias":
            inputs.append(randn(qs[-2], ks[-2]))
        attrs = {key: value for key, value in (("scale", scale), ("causal", causal)) if value}
        forward = lambda *t, scale=scale, causal=causal: attention_reference(
            *t[:3], t[3] if len(t) > 3 else None, scale, causal)
        add_case(f"attention_{name}", "attention", attrs, inputs, forward)
        out, lse = (r.float() for r in forward(*[t.double() if t.is_floating_point() else t
                                                 for t in inputs]))

        def oracle(dy, q, k, v, out, lse, *mask, scale=scale, causal=causal):
            q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
            result = attention_reference(q, k, v, mask[0] if mask else None, scale, causal)[0]
            return torch.autograd.grad(result, (q, k, v), dy)
        add_case(f"attention_grad_{name}", "attention_grad", attrs,
                 [randn(*out.shape), q, k, v, out, lse] + inputs[3:], oracle)
    h = lambda *shape: randn(*shape).half()
    q, k, v, dy = h(2, 10, 8), h(2, 14, 8), h(2, 14, 8), h(2, 10, 8)
    out, lse = attention_reference(q.double(), k.double(), v.double())

    def f16_oracle(dy, q, k, v, out, lse):
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        return torch.autograd.grad(attention_reference(q, k, v)[0], (q, k, v), dy)
    add_case("attention_grad_f16", "attention_grad", {},
             [dy, q, k, v, out.half(), lse.float()], f16_oracle)


def transformer_cases():
    gather_elements_grad_cases()
    rms_norm_cases()
    attention_cases()
