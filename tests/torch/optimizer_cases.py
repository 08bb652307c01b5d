"""Differential cases for the optimizer updates: one torch.optim step from a given state.

Each case hands kiln (param, grad, state...) and asks torch.optim.SGD / Adam / AdamW, run in
float64 on the same values, for the parameter and state after one step. The state goes into the
optimizer's own state dict, so the cases check kiln against torch.optim's code, not against a
transcription of its formulas. Used by gen_cases.py.
"""
import math
import warnings

import torch
import torch.nn.utils.prune

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

    # The per-step scalars (lr_scale, grad_scale): torch.optim with lr = lr * lr_scale, after
    # torch.nn.utils.clip_grad_norm_ has multiplied the gradient by grad_scale in place.
    def scaled(oracle_of, attrs):
        def oracle(*inputs):
            *state, lr_scale, grad_scale = inputs
            scaled_attrs = dict(attrs, lr=attrs["lr"] * float(lr_scale[0]))
            state[1] = state[1] * grad_scale[0]
            return oracle_of(scaled_attrs)(*state)
        return oracle

    lr_scale, grad_scale = torch.tensor([0.3]), torch.tensor([0.45])
    attrs = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}
    add_case("sgd_update_scaled", "sgd_update", attrs,
             [randn(5, 3), randn(5, 3), randn(5, 3), lr_scale, grad_scale],
             scaled(sgd_step, attrs))
    attrs = {"lr": 0.1}
    add_case("sgd_update_lr_scaled", "sgd_update", attrs,
             [randn(8), randn(8), lr_scale], lambda p, g, s: sgd_step({"lr": 0.1 * float(s[0])})(p, g))
    for op, optimizer in (("adam_update", torch.optim.Adam), ("adamw_update", torch.optim.AdamW)):
        attrs = {"lr": 0.01, "weight_decay": 0.05}
        add_case(f"{op}_scaled", op, attrs,
                 [randn(4, 6), randn(4, 6), randn(4, 6, scale=0.1),
                  torch.rand(4, 6) * 0.01, torch.tensor([5], dtype=torch.int32), lr_scale,
                  grad_scale],
                 scaled(lambda a, o=optimizer: adam_step(o, a), attrs))

    # grad_norm_clip against torch.nn.utils.clip_grad_norm_ itself: the factor is what the clip
    # multiplied a gradient by, the norm what it returned. One set of gradients above max_norm
    # (clipped) and one below (factor 1).
    def clip_oracle(max_norm):
        def oracle(*grads):
            params = [torch.zeros_like(g, requires_grad=True) for g in grads]
            for p, g in zip(params, grads):
                p.grad = g.clone()
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            factor = params[0].grad.reshape(-1)[0] / grads[0].reshape(-1)[0]
            return factor.reshape(1), norm.reshape(1)
        return oracle

    grads = [randn(3, 4), randn(5), randn(2, 2, 2, scale=0.5)]
    for max_norm in (1.0, 100.0):
        add_case(f"grad_norm_clip_{max_norm:g}", "grad_norm_clip", {"max_norm": max_norm}, grads,
                 clip_oracle(max_norm))

    # With loss scaling (unscale): gradients scaled by 1 / u, as GradScaler.unscale_ leaves them
    # for clip_grad_norm_; the factor multiplies the scaled gradients, so it is u times the
    # clip's, and 0 stays 0 (a skipped step).
    def unscaled_clip_oracle(max_norm):
        def oracle(u, *grads):
            factor, norm = clip_oracle(max_norm)(*[g * u[0] for g in grads])
            # u = 0: every unscaled gradient is 0 and the clip leaves them so (factor 0 / 0).
            return (factor * u[0] if float(u[0]) else torch.zeros(1)), norm
        return oracle

    scaled = [g * 1024 for g in grads]
    for tag, u, max_norm in (("clipped", 1 / 1024, 1.0), ("unclipped", 1 / 1024, 100.0),
                             ("skipped", 0.0, 1.0)):
        add_case(f"grad_norm_clip_unscale_{tag}", "grad_norm_clip",
                 {"max_norm": max_norm, "unscale": True}, [torch.tensor([u])] + scaled,
                 unscaled_clip_oracle(max_norm))

    # loss_scale_update: torch.cuda.amp.GradScaler's unscale_ and update. GradScaler runs only
    # on CUDA in Debian's torch 1.13 (its kernels _amp_foreach_non_finite_check_and_unscale_ and
    # _amp_update_scale_ have no CPU backend), so the update rule of _amp_update_scale_
    # (aten/src/ATen/native/cuda/AmpKernels.cu) is written out here; found_inf is torch's own
    # isfinite over the gradients, the factor GradScaler's inv_scale (0: optimizer.step skipped).
    def loss_scale_oracle(attrs):
        growth, backoff = attrs.get("growth_factor", 2.0), attrs.get("backoff_factor", 0.5)
        interval = attrs.get("growth_interval", 2000)

        def oracle(scale, good, skipped, *grads):
            found_inf = not all(bool(torch.isfinite(g).all()) for g in grads)
            scale, good, skipped = float(scale[0]), int(good[0]), int(skipped[0])
            if found_inf:
                factor, scale, good, skipped = 0.0, scale * backoff, 0, skipped + 1
            else:
                factor, good = 1.0 / scale, good + 1
                if good == interval:  # the scale never grows to inf
                    grown = float(torch.tensor(scale * growth, dtype=torch.float32))
                    scale, good = (grown if math.isfinite(grown) else scale), 0
            return (torch.tensor([factor]), torch.tensor([scale]),
                    torch.tensor([good], dtype=torch.int32), torch.tensor([skipped], dtype=torch.int32))
        return oracle

    counters = lambda good, skipped: [torch.tensor([good], dtype=torch.int32),
                                      torch.tensor([skipped], dtype=torch.int32)]
    inf_grad, nan_grad = randn(5) * 1000, randn(3, 2)
    inf_grad[2] = -math.inf
    nan_grad[1, 0] = math.nan
    scaler_cases = [("finite", {}, torch.tensor([65536.0]), 17, 0, [randn(3, 4) * 1000, randn(5)]),
                    ("grows", {"growth_interval": 18}, torch.tensor([65536.0]), 17, 2,
                     [randn(3, 4), randn(5)]),
                    ("inf", {}, torch.tensor([65536.0]), 17, 2, [randn(3, 4), inf_grad]),
                    ("nan", {"backoff_factor": 0.25}, torch.tensor([3.0]), 0, 0,
                     [nan_grad, randn(4)]),
                    ("factors", {"growth_factor": 4.0, "growth_interval": 1},
                     torch.tensor([0.5]), 0, 1, [randn(2, 2, 2)]),
                    ("capped", {"growth_interval": 1}, torch.tensor([3e38]), 0, 0, [randn(3)])]
    for tag, attrs, scale, good, skipped, grads in scaler_cases:
        add_case(f"loss_scale_update_{tag}", "loss_scale_update", attrs,
                 [scale] + counters(good, skipped) + grads, loss_scale_oracle(attrs),
                 out_dtype=["f32", "f32", "i32", "i32"])

    # prune_mask: unstructured steps against torch.nn.utils.prune.l1_unstructured itself (the
    # amount as a count: the cubic schedule's sparsity at the step times the elements, rounded
    # down); 2:4 against torch.topk over each group of 4; other steps keep the mask.
    def prune_oracle(attrs):
        start, end = attrs.get("start", 1), attrs["end"]
        frequency, final = attrs.get("frequency", 1), attrs.get("sparsity", 0.5)

        def oracle(w, mask, step):
            t = int(step.reshape(-1)[0])
            if t < start or t > end or ((t - start) % frequency and t != end):
                return mask.clone()
            if attrs.get("pattern") == "2:4":
                groups = w.abs().reshape(-1, 4)
                keep = torch.zeros_like(groups)
                keep.scatter_(1, torch.topk(groups, 2, dim=1).indices, 1.0)
                return keep.reshape(w.shape)
            progress = 1.0 if end == start else (t - start) / (end - start)
            amount = math.floor(final * (1 - (1 - progress) ** 3) * w.numel())
            module = torch.nn.Linear(1, 1)
            module.weight = torch.nn.Parameter(w.clone())
            torch.nn.utils.prune.l1_unstructured(module, "weight", amount=amount)
            return module.weight_mask * mask
        return oracle

    w = randn(12, 20)
    half_pruned = w.clone()
    half_pruned[w.abs() < 0.6] = 0  # the zeros of an earlier step, with their mask
    earlier_mask = (half_pruned != 0).float()
    step = lambda t: torch.tensor([t], dtype=torch.int32)
    prune_cases = [("start", {"sparsity": 0.8, "start": 3, "end": 13}, w, torch.ones(12, 20), 3),
                   ("mid", {"sparsity": 0.8, "start": 3, "end": 13}, half_pruned, earlier_mask, 8),
                   ("end", {"sparsity": 0.9, "start": 3, "end": 13, "frequency": 5},
                    half_pruned, earlier_mask, 13),
                   ("off_frequency", {"sparsity": 0.9, "start": 3, "end": 13, "frequency": 5},
                    half_pruned, earlier_mask, 12),
                   ("end_off_frequency", {"sparsity": 0.9, "start": 3, "end": 14, "frequency": 5},
                    half_pruned, earlier_mask, 14),
                   ("after_end", {"sparsity": 0.9, "end": 4}, half_pruned, earlier_mask, 5),
                   ("one_step", {"sparsity": 0.5, "start": 2, "end": 2}, randn(7, 3, 3),
                    torch.ones(7, 3, 3), 2),
                   ("two_four", {"end": 10, "pattern": "2:4"}, randn(6, 2, 2, 3),
                    torch.ones(6, 2, 2, 3), 4)]
    for tag, attrs, weights, mask, t in prune_cases:
        add_case(f"prune_mask_{tag}", "prune_mask", attrs, [weights, mask, step(t)],
                 prune_oracle(attrs))

    # all_reduce against torch.distributed's own all_reduce, in a group of one process (gloo has
    # no AVG: the sum over the ranks divided by their number): one rank's mean is each tensor.
    import tempfile
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0,
                                world_size=1)

    def all_reduce_oracle(*tensors):
        means = []
        for tensor in tensors:
            tensor = tensor.clone()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            means.append(tensor / dist.get_world_size())
        return tuple(means)

    add_case("all_reduce_bucket", "all_reduce", {"bucket": 3}, [randn(3, 4), randn(5), randn(2, 3, 2)],
             all_reduce_oracle)

    # broadcast against torch.distributed.broadcast from rank 0 in the same group of one.
    def broadcast_oracle(*tensors):
        import torch.distributed as dist
        copies = [tensor.clone() for tensor in tensors]
        for copy in copies:
            dist.broadcast(copy, src=0)
        return tuple(copies)

    add_case("broadcast_state", "broadcast", {}, [randn(6), randn(2, 5)], broadcast_oracle)

    # lr_schedule against torch.optim.lr_scheduler itself: LinearLR from 1 / warmup for the
    # warmup, then CosineAnnealingLR (or LinearLR) to min_scale, chained by SequentialLR at
    # milestone warmup; the factor of the 1-based step t is the lr after t - 1 scheduler steps
    # (at most total_steps: CosineAnnealingLR climbs again after T_max, lr_schedule stays).
    def schedule_oracle(attrs):
        warmup, total = attrs.get("warmup_steps", 0), attrs.get("total_steps", 0)
        min_scale, decay = attrs.get("min_scale", 0.0), attrs.get("decay", "cosine")

        def oracle(step):
            param = torch.zeros(1, requires_grad=True)
            opt = torch.optim.SGD([param], lr=1.0)
            sched = lambda: (torch.optim.lr_scheduler.CosineAnnealingLR(opt, total - warmup, min_scale)
                             if decay == "cosine" else
                             torch.optim.lr_scheduler.LinearLR(opt, 1.0, min_scale, total - warmup))
            if decay == "constant":  # the warmup alone: LinearLR stays at 1 after it
                schedule = torch.optim.lr_scheduler.LinearLR(opt, 1.0 / warmup, 1.0, warmup - 1)
            elif warmup:
                ramp = torch.optim.lr_scheduler.LinearLR(opt, 1.0 / warmup, 1.0, warmup - 1)
                schedule = torch.optim.lr_scheduler.SequentialLR(opt, [ramp, sched()], [warmup])
            else:
                schedule = sched()
            with warnings.catch_warnings():  # SequentialLR's own call of step(0), in torch 1.13
                warnings.simplefilter("ignore", UserWarning)
                for _ in range(int(step[0]) - 1):
                    opt.step()
                    schedule.step()
            return torch.tensor([opt.param_groups[0]["lr"]], dtype=torch.float64)
        return oracle

    schedules = [({"warmup_steps": 4, "total_steps": 20, "min_scale": 0.1}, (1, 3, 4, 5, 6, 13, 21)),
                 ({"total_steps": 12, "decay": "linear"}, (1, 2, 7, 13)),
                 ({"warmup_steps": 3, "total_steps": 9, "decay": "linear", "min_scale": 0.5}, (2, 4, 10)),
                 ({"warmup_steps": 5, "decay": "constant"}, (2, 9))]
    for attrs, steps in schedules:
        for step in steps:
            tag = "_".join(f"{k}{v}" for k, v in attrs.items())
            add_case(f"lr_schedule_{tag}_step{step}", "lr_schedule", attrs,
                     [torch.tensor([step], dtype=torch.int32)], schedule_oracle(attrs),
                     out_dtype="f32")
