#!/usr/bin/python3
"""Builds the small ONNX models of the importer's lit tests (tests/lit/import/), with ONNX's
own helpers (Debian python3-onnx) or by exporting a PyTorch module (torch.onnx.export), and
writes the inputs and PyTorch's outputs as .npy files beside them.

usage: onnx_models.py KIND DIR    (KIND: one of the functions in MODELS below)"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, directory, name="model.onnx"):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(directory, name))


def shape_arithmetic(directory):
    """A conv net whose flatten is computed from Shape/Gather/Unsqueeze/Concat, as torch exports
    x.view(x.size(0), -1); a symbolic batch; asymmetric pads; Gemm with transB."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv.bias")
    fc_w = numpy_helper.from_array(rng.standard_normal((5, 4 * 4 * 3)).astype(np.float32), "fc.weight")
    fc_b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc.bias")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")
    minus_one = numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one")
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="Conv_0",
                         pads=[1, 0, 1, 2], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="Relu_1"),
        helper.make_node("MaxPool", ["r"], ["p"], name="MaxPool_2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Shape", ["p"], ["s"], name="Shape_3"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="Gather_4", axis=0),
        helper.make_node("Unsqueeze", ["n"], ["n1"], name="Unsqueeze_5", axes=[0]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="Concat_6", axis=0),
        helper.make_node("Reshape", ["p", "target"], ["flat"], name="Reshape_7"),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="Gemm_8", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs:0"], name="Softmax_9", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "shape_arithmetic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 7])],
        [helper.make_tensor_value_info("probs:0", TensorProto.FLOAT, ["batch", 5])],
        [w, b, fc_w, fc_b, zero, minus_one])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), directory)
    x = rng.standard_normal((2, 3, 8, 7)).astype(np.float32)
    np.save(os.path.join(directory, "x.npy"), x)
    # The same computation in PyTorch, the oracle.
    import torch
    t = torch.nn.functional.pad(torch.from_numpy(x), (0, 2, 1, 1))
    t = torch.nn.functional.conv2d(t, torch.tensor(numpy_helper.to_array(w)), torch.tensor(numpy_helper.to_array(b)))
    t = torch.nn.functional.max_pool2d(torch.relu(t), 2, 2).reshape(2, -1)
    t = torch.nn.functional.linear(t, torch.tensor(numpy_helper.to_array(fc_w)), torch.tensor(numpy_helper.to_array(fc_b)))
    np.save(os.path.join(directory, "expected.npy"), torch.softmax(t, 1).numpy())


def unsupported(directory):
    """Three nodes kiln cannot import (an unknown op, a run-time shape, another domain) and a
    good one between them: all three are reported at once."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["a"], name="nonzero_0"),
        helper.make_node("Relu", ["x"], ["b"], name="relu_1"),
        helper.make_node("Reshape", ["b", "x_shape"], ["c"], name="reshape_2"),
        helper.make_node("Shape", ["x"], ["x_shape_unused"], name="shape_3"),
        helper.make_node("FusedGemm", ["b", "b"], ["d"], name="fused_4", domain="com.microsoft"),
        helper.make_node("Add", ["a", "c"], ["y"], name="add_5"),
    ]
    graph = helper.make_graph(
        nodes, "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("x_shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, os.path.join(directory, "model.onnx"))


def external_data(directory):
    """A MatMul whose weight lives in an external data file next to the model."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul_0")], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, os.path.join(directory, "model.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    np.save(os.path.join(directory, "x.npy"), x)
    np.save(os.path.join(directory, "expected.npy"), x @ w)


def torchvision_model(directory, name, opset, size):
    """A torchvision classifier with seeded random weights, exported by torch.onnx.export with a
    symbolic batch; PyTorch's output on a seeded input is the oracle."""
    import torch
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        expected = model(x)
    torch.onnx.export(model, x, os.path.join(directory, "model.onnx"), opset_version=opset,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    np.save(os.path.join(directory, "image.npy"), x.numpy())
    np.save(os.path.join(directory, "expected.npy"), expected.numpy())


def resize_opset18(directory):
    """Resize's opset 18/19 settings that Debian's node tests (onnx 1.12) predate: antialias,
    axes with keep_aspect_ratio_policy, half_pixel_symmetric. Each expected output is the one
    ONNX's operator documentation gives for that example (onnx.ai/onnx/operators/onnx__Resize)."""
    cases = {
        "linear_antialias": ({"mode": "linear", "antialias": 1}, 16, None, [1, 1, 3, 3], None, 18,
                             [[2.3636363, 3.590909, 4.818182], [7.2727275, 8.5, 9.727273],
                              [12.181818, 13.409091, 14.636364]]),
        "cubic_antialias": ({"mode": "cubic", "antialias": 1}, 16, None, [1, 1, 3, 3], None, 18,
                            [[1.7750092, 3.1200073, 4.4650054], [7.1550016, 8.5, 9.844998],
                             [12.534994, 13.8799925, 15.224991]]),
        "not_larger": ({"mode": "nearest", "keep_aspect_ratio_policy": "not_larger"}, 4, None, [7, 8], [2, 3], 18,
                       [[1] * 4 + [2] * 3] * 4 + [[3] * 4 + [4] * 3] * 3),
        "half_pixel_symmetric": ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, 4,
                                 [1.0, 1.0, 2.3, 2.94], None, None, 19,
                                 [[1.0, 1.15986395, 1.5, 1.84013605, 2.0],
                                  [1.56521738, 1.72508133, 2.06521738, 2.40535343, 2.56521738],
                                  [2.43478262, 2.59464657, 2.93478262, 3.27491867, 3.43478262],
                                  [3.0, 3.15986395, 3.5, 3.84013605, 4.0]]),
    }
    for name, (attrs, count, scales, sizes, axes, opset, expected) in cases.items():
        side = int(np.sqrt(count))
        inits, inputs = [], ["x", ""]
        if scales is not None:
            inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
            inputs.append("scales")
        else:
            inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
            inputs += ["", "sizes"]
        if axes is not None:
            attrs = dict(attrs, axes=axes)
        node = helper.make_node("Resize", inputs, ["y"], name="Resize_0", **attrs)
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, side, side])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        onnx.save(model, os.path.join(directory, name + ".onnx"))  # onnx 1.12's checker predates opset 18
        np.save(os.path.join(directory, name + ".x.npy"), np.arange(1, count + 1, dtype=np.float32).reshape(1, 1, side, side))
        np.save(os.path.join(directory, name + ".expected.npy"), np.array(expected, np.float32)[None, None])


def torch_interpolate(directory):
    """F.interpolate as PyTorch exports it (Resize, at opsets 11 and 13): nearest
    x2, bilinear to a size, bicubic with align_corners; PyTorch's output is the oracle."""
    import torch
    import torch.nn.functional as F

    class Upsampler(torch.nn.Module):
        def forward(self, x):
            a = F.interpolate(x, scale_factor=2, mode="nearest")
            b = F.interpolate(x, size=(9, 5), mode="bilinear", align_corners=False)
            c = F.interpolate(x, size=(4, 11), mode="bicubic", align_corners=True)
            return a.sum() + b, c

    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 7)
    with torch.no_grad():
        b, c = Upsampler()(x)
    for opset in (11, 13):  # 11: the roi is an empty Constant; 13: an absent input
        torch.onnx.export(Upsampler(), x, os.path.join(directory, f"interpolate{opset}.onnx"),
                          opset_version=opset, input_names=["x"], output_names=["b", "c"])
    np.save(os.path.join(directory, "x.npy"), x.numpy())
    np.save(os.path.join(directory, "b.npy"), b.numpy())
    np.save(os.path.join(directory, "c.npy"), c.numpy())


def torch_flip(directory):
    """torch.flip (exported as Slice with negative steps), PyTorch's output the oracle."""
    import torch

    class Flipper(torch.nn.Module):
        def forward(self, x):
            return torch.flip(x, [1, 3]) * 2 + x.flip(2)

    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5)
    with torch.no_grad():
        y = Flipper()(x)
    torch.onnx.export(Flipper(), x, os.path.join(directory, "flip.onnx"), opset_version=13,
                      input_names=["x"], output_names=["y"])
    np.save(os.path.join(directory, "x.npy"), x.numpy())
    np.save(os.path.join(directory, "y.npy"), y.numpy())


def torch_recurrent(directory):
    """torch.nn.LSTM (2 layers, bidirectional, batch first), GRU (bidirectional: ONNX's
    linear_before_reset) and RNN (ReLU), exported at opset 14; PyTorch's outputs the oracle."""
    import torch

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 5, num_layers=2, bidirectional=True, batch_first=True)
            self.gru = torch.nn.GRU(10, 3, bidirectional=True, batch_first=True)
            self.rnn = torch.nn.RNN(6, 4, nonlinearity="relu", batch_first=True)

        def forward(self, x, h0, c0):
            y, (h, c) = self.lstm(x, (h0, c0))
            z, g = self.gru(y)
            w, r = self.rnn(z)
            return w, h, c, g, r

    torch.manual_seed(0)
    model = Recurrent().eval()
    inputs = (torch.randn(2, 3, 4), torch.randn(4, 2, 5), torch.randn(4, 2, 5))
    names = ["y", "h", "c", "g", "r"]
    with torch.no_grad():
        outputs = model(*inputs)
    torch.onnx.export(model, inputs, os.path.join(directory, "recurrent.onnx"), opset_version=14,
                      input_names=["x", "h0", "c0"], output_names=names)
    for name, value in zip(["x", "h0", "c0"], inputs):
        np.save(os.path.join(directory, name + ".npy"), value.numpy())
    for name, value in zip(names, outputs):
        np.save(os.path.join(directory, name + ".npy"), value.numpy())


def recurrent_spec(directory):
    """An LSTM (reverse, clip, coupled input and forget gates) and a GRU (reverse, HardSigmoid and
    LeakyRelu, linear_before_reset = 0) with sequence_lens given at run time: what PyTorch's
    export never produces. The oracle is a NumPy transcription of the ONNX operator spec."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)
    T, B, I, H = 5, 3, 2, 4
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    lens = np.array([5, 2, 0], dtype=np.int32)
    lw, lr, lb = (rng.standard_normal(s).astype(np.float32) * 0.7 for s in [(1, 4 * H, I), (1, 4 * H, H), (1, 8 * H)])
    gw, gr, gb = (rng.standard_normal(s).astype(np.float32) * 0.7 for s in [(1, 3 * H, I), (1, 3 * H, H), (1, 6 * H)])
    sigmoid = lambda v: 1 / (1 + np.exp(-v))
    hard_sigmoid = lambda v: np.clip(0.3 * v + 0.4, 0, 1)
    leaky = lambda v: np.where(v >= 0, v, 0.2 * v)
    clip = 1.5

    def run(step, state, n):
        """Steps backwards from each entry's last step; state frozen and Y zero past its length."""
        y = np.zeros((T, 1, B, H), np.float32)
        for t in reversed(range(T)):
            new = step(x[t], *state)
            live = (t < lens)[:, None]
            y[t, 0] = np.where(live, new[0], 0)
            state = [np.where(live, a, b) for a, b in zip(new, state)]
        return [y] + [s[None] for s in state[:n]]

    def lstm_step(xt, h, c):
        g = xt @ lw[0].T + h @ lr[0].T + lb[0, :4 * H] + lb[0, 4 * H:]
        i, o, _, cc = np.split(np.clip(g, -clip, clip), 4, axis=1)
        i = sigmoid(i)
        c_new = (1 - i) * c + i * np.tanh(cc)
        return [sigmoid(o) * np.tanh(c_new), c_new]

    def gru_step(xt, h):
        wz, wr, wh = np.split(gw[0], 3)
        rz, rr, rh = np.split(gr[0], 3)
        b = np.split(gb[0], 6)
        z = hard_sigmoid(xt @ wz.T + h @ rz.T + b[0] + b[3])
        r = hard_sigmoid(xt @ wr.T + h @ rr.T + b[1] + b[4])
        hh = leaky(xt @ wh.T + (r * h) @ rh.T + b[2] + b[5])
        return [(1 - z) * hh + z * h]

    zeros = np.zeros((B, H), np.float32)
    expected = run(lstm_step, [zeros, zeros], 2) + run(gru_step, [zeros], 1)
    nodes = [
        helper.make_node("LSTM", ["x", "lw", "lr", "lb", "lens"], ["ly", "lh", "lc"], hidden_size=H,
                         direction="reverse", clip=clip, input_forget=1),
        helper.make_node("GRU", ["x", "gw", "gr", "gb", "lens"], ["gy", "gh"], hidden_size=H, direction="reverse",
                         activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.3, 0.2],
                         activation_beta=[0.4]),
    ]
    weights = {"lw": lw, "lr": lr, "lb": lb, "gw": gw, "gr": gr, "gb": gb}
    outputs = ["ly", "lh", "lc", "gy", "gh"]
    graph = helper.make_graph(
        nodes, "recurrent_spec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I]),
         helper.make_tensor_value_info("lens", TensorProto.INT32, [B])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape))
         for name, value in zip(outputs, expected)],
        [helper.make_tensor(name, TensorProto.FLOAT, value.shape, value.flatten()) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with open(os.path.join(directory, "recurrent_spec.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    np.save(os.path.join(directory, "x.npy"), x)
    np.save(os.path.join(directory, "lens.npy"), lens)
    for name, value in zip(outputs, expected):
        np.save(os.path.join(directory, name + ".npy"), value.astype(np.float32))


def quantized(directory):
    """Per-channel quantization paths the node tests leave out: QuantizeLinear along axis 1 to
    int8 with negative zero points, DequantizeLinear back, MatMulInteger with a zero point per
    row of A and per column of B, and QLinearConv with a per-output-channel weight scale and an
    int32 bias. The oracle is NumPy following the operator spec."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 3
    q_scale = np.array([0.05, 0.1, 0.02], np.float32)
    q_zp = np.array([-3, 0, 7], np.int8)
    shaped = lambda v: v.reshape(1, 3, 1)
    q = np.clip(np.rint(x / shaped(q_scale)) + shaped(q_zp), -128, 127).astype(np.int8)
    dq = ((q.astype(np.float64) - shaped(q_zp)) * shaped(q_scale)).astype(np.float32)

    a = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    b = rng.integers(-128, 128, (5, 2)).astype(np.int8)
    a_zp = np.array([1, 128, 255], np.uint8)
    b_zp = np.array([-1, 3], np.int8)
    mm = ((a.astype(np.int64) - a_zp[:, None]) @ (b.astype(np.int64) - b_zp)).astype(np.int32)

    cx = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    cw = rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    x_scale, x_zp = np.float32(0.02), np.uint8(120)
    w_scale = np.array([0.01, 0.002, 0.03], np.float32)
    w_zp = np.array([0, 0, 0], np.int8)
    bias = np.array([100, -2000, 5], np.int32)
    y_scale, y_zp = np.float32(0.05), np.uint8(128)
    xf = (cx.astype(np.float64) - x_zp) * x_scale
    wf = (cw.astype(np.float64) - w_zp[:, None, None, None]) * w_scale[:, None, None, None]
    xp = np.pad(xf, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 3, 5, 5))
    for m in range(3):
        for i in range(5):
            for j in range(5):
                conv[0, m, i, j] = (xp[0, :, i:i + 3, j:j + 3] * wf[m]).sum()
    conv += (bias * x_scale * w_scale.astype(np.float64))[None, :, None, None]
    qc = np.clip(np.rint(conv / y_scale) + y_zp, 0, 255).astype(np.uint8)

    constants = {"q_scale": q_scale, "q_zp": q_zp, "b": b, "a_zp": a_zp, "b_zp": b_zp, "cw": cw,
                 "x_scale": np.array(x_scale), "x_zp": np.array(x_zp), "w_scale": w_scale, "w_zp": w_zp,
                 "bias": bias, "y_scale": np.array(y_scale), "y_zp": np.array(y_zp)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "q_scale", "q_zp"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "q_scale", "q_zp"], ["dq"], axis=1),
        helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["mm"]),
        helper.make_node("QLinearConv", ["cx", "x_scale", "x_zp", "cw", "w_scale", "w_zp", "y_scale", "y_zp", "bias"],
                         ["qc"], pads=[1, 1, 1, 1]),
    ]
    outputs = {"q": q, "dq": dq, "mm": mm, "qc": qc}
    elem = lambda v: helper.np_dtype_to_tensor_dtype(v.dtype) if hasattr(helper, "np_dtype_to_tensor_dtype") \
        else {np.dtype(k): t for k, t in [("float32", TensorProto.FLOAT), ("int8", TensorProto.INT8),
                                        ("uint8", TensorProto.UINT8), ("int32", TensorProto.INT32)]}[v.dtype]
    graph = helper.make_graph(
        nodes, "quantized",
        [helper.make_tensor_value_info(n, elem(v), list(v.shape)) for n, v in [("x", x), ("a", a), ("cx", cx)]],
        [helper.make_tensor_value_info(n, elem(v), list(v.shape)) for n, v in outputs.items()],
        [numpy_helper.from_array(v, n) for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with open(os.path.join(directory, "quantized.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for name, value in {"x": x, "a": a, "cx": cx, **outputs}.items():
        np.save(os.path.join(directory, name + ".npy"), value)


EINSUM_CASES = [  # (equation, operand shapes)
    ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),  # outer product
    ("ii->i", [(4, 4)]),  # diagonal
    ("ii", [(4, 4)]),  # trace (implicit output: a scalar)
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),  # broadcast ellipsis
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),  # a chain of three
    ("ijk->", [(2, 3, 4)]),  # total
    ("ij,ij->ij", [(3, 4), (3, 4)]),  # elementwise: every label a batch label
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),  # bilinear
    ("iij->ji", [(3, 3, 2)]),  # diagonal then transpose
    ("ba,ca", [(2, 3), (4, 3)]),  # implicit: labels used once, sorted -> 'bc'
]


def torch_einsum(directory):
    """torch.einsum exported as ONNX Einsum (opset 12), one output per case of EINSUM_CASES;
    PyTorch's results the oracle."""
    import torch

    class Einsums(torch.nn.Module):
        def forward(self, *xs):
            outputs, k = [], 0
            for equation, shapes in EINSUM_CASES:
                outputs.append(torch.einsum(equation, *xs[k:k + len(shapes)]))
                k += len(shapes)
            return tuple(outputs)

    torch.manual_seed(0)
    inputs = tuple(torch.randn(*shape) for _, shapes in EINSUM_CASES for shape in shapes)
    with torch.no_grad():
        outputs = Einsums()(*inputs)
    names_in = [f"x{i}" for i in range(len(inputs))]
    names_out = [f"y{i}" for i in range(len(outputs))]
    torch.onnx.export(Einsums(), inputs, os.path.join(directory, "einsum.onnx"), opset_version=12,
                      input_names=names_in, output_names=names_out)
    for name, value in zip(names_in + names_out, inputs + outputs):
        np.save(os.path.join(directory, name + ".npy"), value.numpy())


def gather_reverse(directory):
    """GatherND with two batch dims, tuples of length 2 and negative indices (given at run time),
    and ReverseSequence with the batch on axis 0 and run-time lengths; the oracle is NumPy
    following the operator spec."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    data = rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    indices = np.stack([rng.integers(-4, 4, (2, 3, 7)), rng.integers(-5, 5, (2, 3, 7))], axis=-1).astype(np.int64)
    gathered = np.empty((2, 3, 7, 6), np.float32)
    for a in range(2):
        for b in range(3):
            for t in range(7):
                i, j = indices[a, b, t]
                gathered[a, b, t] = data[a, b, i, j]
    x = rng.standard_normal((3, 5, 2)).astype(np.float32)
    lens = np.array([5, 1, 3], np.int64)
    reversed_ = x.copy()
    for b in range(3):
        reversed_[b, :lens[b]] = x[b, :lens[b]][::-1]
    nodes = [helper.make_node("GatherND", ["data", "indices"], ["gathered"], batch_dims=2),
             helper.make_node("ReverseSequence", ["x", "lens"], ["reversed"], batch_axis=0, time_axis=1)]
    graph = helper.make_graph(
        nodes, "gather_reverse",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, data.shape),
         helper.make_tensor_value_info("indices", TensorProto.INT64, indices.shape),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("lens", TensorProto.INT64, lens.shape)],
        [helper.make_tensor_value_info("gathered", TensorProto.FLOAT, gathered.shape),
         helper.make_tensor_value_info("reversed", TensorProto.FLOAT, reversed_.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with open(os.path.join(directory, "gather_reverse.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for name, value in {"data": data, "indices": indices, "x": x, "lens": lens, "gathered": gathered,
                        "reversed": reversed_}.items():
        np.save(os.path.join(directory, name + ".npy"), value)


def scatter(directory):
    """ScatterElements along axis 1 with updates smaller than data on the other axes (reduction
    none, max, and add and mul with duplicate and negative run-time indices) and ScatterND with
    tuples of length 1 and 2 (min, mul, add); NumPy following the spec is the oracle."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(11)
    data = rng.standard_normal((3, 5, 4)).astype(np.float32)
    updates = rng.standard_normal((2, 3, 3)).astype(np.float32)
    unique = np.ascontiguousarray(np.stack([rng.permutation(5)[:3] for _ in range(2 * 3)]).reshape(2, 3, 3).swapaxes(1, 2)).astype(np.int64)
    repeated = rng.integers(-5, 5, (2, 3, 3)).astype(np.int64)

    def scatter_elements(indices, reduce):
        out = data.copy()
        for i, j, k in np.ndindex(*indices.shape):
            target = (i, indices[i, j, k] % 5, k)
            out[target] = reduce(out[target], updates[i, j, k]) if reduce else updates[i, j, k]
        return out

    nd_data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    rows = np.array([[1], [-1], [1]], np.int64)
    row_updates = rng.standard_normal((3, 3, 2)).astype(np.float32)
    cells = np.array([[0, 2], [3, 0], [0, 2]], np.int64)
    cell_updates = rng.standard_normal((3, 2)).astype(np.float32)
    nd_min = nd_data.copy()
    for t, (r,) in enumerate(rows):
        nd_min[r] = np.minimum(nd_min[r], row_updates[t])
    nd_add = nd_data.copy()
    for t, (r, c) in enumerate(cells):
        nd_add[r, c] += cell_updates[t]

    nd_mul = nd_data.copy()
    for t, (r,) in enumerate(rows):
        nd_mul[r] = nd_mul[r] * row_updates[t]

    expected = {"none": scatter_elements(unique, None), "max": scatter_elements(unique, max),
                "add": scatter_elements(repeated, lambda a, b: a + b), "mul": scatter_elements(repeated, lambda a, b: a * b),
                "nd_min": nd_min, "nd_add": nd_add, "nd_mul": nd_mul}
    nodes = [
        helper.make_node("ScatterElements", ["data", "unique", "updates"], ["none"], axis=1),
        helper.make_node("ScatterElements", ["data", "unique", "updates"], ["max"], axis=1, reduction="max"),
        helper.make_node("ScatterElements", ["data", "repeated", "updates"], ["add"], axis=1, reduction="add"),
        helper.make_node("ScatterElements", ["data", "repeated", "updates"], ["mul"], axis=1, reduction="mul"),
        helper.make_node("ScatterND", ["nd_data", "rows", "row_updates"], ["nd_min"], reduction="min"),
        helper.make_node("ScatterND", ["nd_data", "cells", "cell_updates"], ["nd_add"], reduction="add"),
        helper.make_node("ScatterND", ["nd_data", "rows", "row_updates"], ["nd_mul"], reduction="mul"),
    ]
    inputs = {"data": data, "updates": updates, "unique": unique, "repeated": repeated, "nd_data": nd_data,
              "rows": rows, "row_updates": row_updates, "cells": cells, "cell_updates": cell_updates}
    kind = lambda v: TensorProto.INT64 if v.dtype == np.int64 else TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "scatter", [helper.make_tensor_value_info(n, kind(v), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in expected.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    with open(os.path.join(directory, "scatter.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for name, value in {**inputs, **{"want_" + n: v for n, v in expected.items()}}.items():
        np.save(os.path.join(directory, name + ".npy"), value)


def torch_topk(directory):
    """torch.topk exported as ONNX TopK (opset 11): the 3 largest along a middle axis and the 2
    smallest along the last, PyTorch's values and indices the oracle; and ties (a repeated
    value), which ONNX resolves to the lower index first and PyTorch does not: that case's
    indices come from NumPy's stable sort."""
    import torch

    class TopK(torch.nn.Module):
        def forward(self, x, t):
            a, ai = torch.topk(x, 3, dim=1)
            b, bi = torch.topk(x, 2, dim=-1, largest=False)
            c, ci = torch.topk(t, 4, dim=0)
            return a, ai, b, bi, c, ci

    torch.manual_seed(0)
    x = torch.randn(2, 6, 5)
    t = torch.tensor([3.0, 1.0, 3.0, 2.0, 3.0, 0.5])
    names = ["a", "ai", "b", "bi", "c", "ci"]
    with torch.no_grad():
        outputs = TopK()(x, t)
    torch.onnx.export(TopK(), (x, t), os.path.join(directory, "topk.onnx"), opset_version=11,
                      input_names=["x", "t"], output_names=names)
    np.save(os.path.join(directory, "x.npy"), x.numpy())
    np.save(os.path.join(directory, "t.npy"), t.numpy())
    outputs = [value.numpy() for value in outputs]
    outputs[5] = np.argsort(-t.numpy(), kind="stable")[:4]
    for name, value in zip(names, outputs):
        np.save(os.path.join(directory, name + ".npy"), value)


def torch_grid_sample(directory):
    """F.grid_sample exported as ONNX GridSample (opset 16) in every mode, padding mode and
    align_corners, with grid points well outside [-1, 1]; PyTorch is the oracle, except for
    bicubic with border padding, where ONNX (its reference and ONNX Runtime) clamps the
    coordinate before taking the 4x4 taps and PyTorch clamps each tap: NumPy following ONNX's
    steps is the oracle there."""
    import itertools

    import torch

    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 4)
    grid = torch.rand(2, 6, 7, 2) * 3.2 - 1.6
    grid[0, 0, 0] = torch.tensor([1.0, -1.0])  # the corners exactly
    grid[0, 0, 1] = torch.tensor([-1.25, 1.25])
    cases = list(itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [0, 1]))
    names = ["%s_%s_%d" % case for case in cases]

    class Sample(torch.nn.Module):
        def forward(self, x, grid):
            return tuple(torch.nn.functional.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=bool(a))
                         for m, p, a in cases)

    torch.onnx.export(Sample(), (x, grid), os.path.join(directory, "grid_sample.onnx"), opset_version=16,
                      input_names=["x", "grid"], output_names=names)
    with torch.no_grad():
        outputs = dict(zip(names, (o.numpy() for o in Sample()(x, grid))))

    def bicubic_border(image, points, align_corners):
        def kernel(t):
            t, a = abs(t), -0.75
            return ((a + 2) * t - (a + 3)) * t * t + 1 if t <= 1 else ((a * t - 5 * a) * t + 8 * a) * t - 4 * a if t < 2 else 0

        n, c, h, w = image.shape
        out = np.zeros((n, c) + points.shape[1:3], np.float32)
        for b, i, j in np.ndindex(n, *points.shape[1:3]):
            coords = []
            for g, size in ((points[b, i, j, 1], h), (points[b, i, j, 0], w)):
                v = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
                low, high = (0, size - 1) if align_corners else (-0.5, size - 0.5)
                coords.append(min(max(v, 0), size - 1) if v < low or v > high else v)
            y, x_ = coords
            y0, x0 = int(np.floor(y)), int(np.floor(x_))
            for ty, tx in itertools.product(range(y0 - 1, y0 + 3), range(x0 - 1, x0 + 3)):
                weight = kernel(y - ty) * kernel(x_ - tx)
                out[b, :, i, j] += weight * image[b, :, min(max(ty, 0), h - 1), min(max(tx, 0), w - 1)]
        return out

    for a in (0, 1):
        outputs["bicubic_border_%d" % a] = bicubic_border(x.numpy().astype(np.float64), grid.numpy().astype(np.float64), a)
    np.save(os.path.join(directory, "x.npy"), x.numpy())
    np.save(os.path.join(directory, "grid.npy"), grid.numpy())
    for name, value in outputs.items():
        np.save(os.path.join(directory, "want_" + name + ".npy"), value)


def torch_volume(directory):
    """3-D layers: Conv3d (kiln: conv2d per depth tap over depth slices folded into the batch)
    with stride, padding, dilation and bias, and grouped without bias; pooling (one
    spatial dim at a time): MaxPool3d with padding, dilation and ceil_mode, AvgPool3d with and
    without counting the padding; PyTorch is the oracle."""
    import torch

    class Pools(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv3d(3, 4, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 2), dilation=(2, 1, 1),
                                        groups=1, bias=True)
            self.grouped = torch.nn.Conv3d(3, 6, 3, padding=1, groups=3, bias=False)
            self.max = torch.nn.MaxPool3d(3, stride=2, padding=1, dilation=2, ceil_mode=True)
            self.avg = torch.nn.AvgPool3d((2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0), count_include_pad=False,
                                          ceil_mode=True)
            self.avg_padded = torch.nn.AvgPool3d(3, stride=2, padding=1)

        def forward(self, x):
            return self.max(x), self.avg(x), self.avg_padded(x), self.conv(x), self.grouped(x)

    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 9, 8)
    names = ["max", "avg", "avg_padded", "conv", "grouped"]
    model = Pools().eval()
    torch.onnx.export(model, (x,), os.path.join(directory, "volume.onnx"), opset_version=13, input_names=["x"],
                      output_names=names)
    np.save(os.path.join(directory, "x.npy"), x.numpy())
    with torch.no_grad():
        for name, value in zip(names, model(x)):
            np.save(os.path.join(directory, "want_" + name + ".npy"), value.numpy())


def torch_pool_indices(directory):
    """MaxPool2d and MaxPool1d with return_indices (ONNX MaxPool's Indices output, which PyTorch's
    exporter turns into per-plane indices with a second pool and a Sub): padding, stride,
    dilation, ceil_mode, and ties (a constant region, where the first maximum wins); PyTorch is
    the oracle."""
    import torch

    class Pools(torch.nn.Module):
        def forward(self, x, line):
            a, ai = torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True,
                                                   return_indices=True)
            b, bi = torch.nn.functional.max_pool1d(line, 2, stride=2, return_indices=True)
            return a, ai, b, bi

    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 9)
    x[0, 0, :3, :3] = 1.5  # a tie: the first maximum's index
    line = torch.randn(2, 4, 10)
    names = ["a", "ai", "b", "bi"]
    torch.onnx.export(Pools(), (x, line), os.path.join(directory, "pool_indices.onnx"), opset_version=12,
                      input_names=["x", "line"], output_names=names)
    np.save(os.path.join(directory, "x.npy"), x.numpy())
    np.save(os.path.join(directory, "line.npy"), line.numpy())
    with torch.no_grad():
        for name, value in zip(names, Pools()(x, line)):
            np.save(os.path.join(directory, "want_" + name + ".npy"), value.numpy())


MODELS = {
    "torch_pool_indices": torch_pool_indices,
    "torch_volume": torch_volume,
    "torch_grid_sample": torch_grid_sample,
    "torch_topk": torch_topk,
    "scatter": scatter,
    "gather_reverse": gather_reverse,
    "torch_einsum": torch_einsum,
    "quantized": quantized,
    "torch_recurrent": torch_recurrent,
    "recurrent_spec": recurrent_spec,
    "torch_flip": torch_flip,
    "resize_opset18": resize_opset18,
    "torch_interpolate": torch_interpolate,
    "shape_arithmetic": shape_arithmetic,
    "unsupported": unsupported,
    "external_data": external_data,
    "resnet18": lambda d: torchvision_model(d, "resnet18", 13, 64),
}

if __name__ == "__main__":
    kind, directory = sys.argv[1], sys.argv[2]
    os.makedirs(directory, exist_ok=True)
    MODELS[kind](directory)
