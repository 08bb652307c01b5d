"""Differential cases for the optimizer updates: one torch.optim step from a given state.

Each case hands kiln (param, grad, state...) and asks torch.optim.SGD / Adam / AdamW, run in
float64 on the same values, for the parameter and state after one step. The state goes into the
optimizer's own state dict, so the cases check kiln against torch.optim's code, not against a
transcription of its formulas. Used by gen_cases.py.
"""
import torch

from case_writer import add_case, randn


def sgd_step(attrs, first_step=False):
    """An oracle (param, grad[, buffer]) -> (param[, buffer]) for torch.optim.SGD."""
    def oracle(param, grad, buffer=None):
        p = param.clone().requires_grad_(True)
        p.grad = grad.clone()
        opt = torch.optim.SGD([p], **attrs)
        # first_step: PyTorch starts the buffer from the gradient itself; kiln's caller passes
        # zeros, which agrees when dampening is 0 (ir/ops/optimizer.cpp).
        if buffer is not None and not first_step:
            opt.state[p]["momentum_buffer"] = buffer.clone()
        opt.step()
        if buffer is None:
            return p.detach()
        return p.detach(), opt.state[p]["momentum_buffer"]
    return oracle


def adam_step(optimizer, attrs):
    """An oracle (param, grad, m, v, step) -> (param, m, v) for torch.optim.Adam / AdamW."""
    def oracle(param, grad, m, v, step):
        p = param.clone().requires_grad_(True)
        p.grad = grad.clone()
        kwargs = {"lr": attrs["lr"], "betas": (attrs.get("beta1", 0.9), attrs.get("beta2", 0.999)),
                  "eps": attrs.get("eps", 1e-8)}
        if "weight_decay" in attrs:
            kwargs["weight_decay"] = attrs["weight_decay"]
        opt = optimizer([p], **kwargs)
        # torch.optim counts the step it is about to take: store the previous count.
        opt.state[p] = {"step": torch.tensor(float(step.reshape(-1)[0]) - 1),
                        "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
        opt.step()
        state = opt.state[p]
        return p.detach(), state["exp_avg"], state["exp_avg_sq"]
    return oracle


def optimizer_cases():
    shape = (5, 7)
    # SGD: plain, weight decay, momentum with dampening, Nesterov, and a first step from zeros.
    sgd = [("plain", {"lr": 0.1}, False),
           ("weight_decay", {"lr": 0.05, "weight_decay": 0.01}, False),
           ("momentum", {"lr": 0.1, "momentum": 0.9}, True),
           ("momentum_dampening", {"lr": 0.1, "momentum": 0.9, "dampening": 0.25,
                                   "weight_decay": 1e-3}, True),
           ("nesterov", {"lr": 0.01, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
            True)]
    for tag, attrs, has_buffer in sgd:
        inputs = [randn(*shape), randn(*shape)] + ([randn(*shape)] if has_buffer else [])
        add_case(f"sgd_update_{tag}", "sgd_update", attrs, inputs, sgd_step(attrs))
    attrs = {"lr": 0.1, "momentum": 0.9, "nesterov": True}
    add_case("sgd_update_first_step", "sgd_update", attrs,
             [randn(13), randn(13), torch.zeros(13)], sgd_step(attrs, first_step=True))
    add_case("sgd_update_f16", "sgd_update", {"lr": 0.1, "momentum": 0.5},
             [randn(9).half(), randn(9).half(), randn(9).half()],
             sgd_step({"lr": 0.1, "momentum": 0.5}))

    # Adam and AdamW at the first steps (strongest bias correction) and a late one; the second
    # moment must be >= 0, as it always is in a real run.
    adam = [("adam_update", torch.optim.Adam, {"lr": 1e-3}, 1),
            ("adam_update", torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1}, 3),
            ("adam_update", torch.optim.Adam,
             {"lr": 0.02, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}, 1000),
            ("adamw_update", torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01}, 1),
            ("adamw_update", torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.5}, 7)]
    for i, (op, optimizer, attrs, step) in enumerate(adam):
        size = (3, 11) if i % 2 else (17,)
        step_tensor = torch.tensor([step], dtype=torch.int32)
        inputs = [randn(*size), randn(*size), randn(*size, scale=0.1),
                  torch.rand(size, dtype=torch.float32) * 0.01, step_tensor]
        add_case(f"{op}_{i}_step{step}", op, attrs, inputs, adam_step(optimizer, attrs))
    # A float step count, and AdamW with its default weight decay (0.01, as in torch).
    add_case("adamw_update_default_decay_f32_step", "adamw_update", {"lr": 1e-3},
             [randn(6), randn(6), randn(6, scale=0.1), torch.rand(6) * 0.01,
              torch.tensor([2.0])],
             adam_step(torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01}))
