"""ONNX models for ops that no framework here exports, each with a NumPy oracle written from the
operator's specification (onnx.ai/onnx/operators), plus the inputs as .npy files.

Usage: onnx_spec_models.py KIND DIRECTORY (run with /usr/bin/python3: Debian's onnx, numpy).
onnx_models.py holds the models exported from PyTorch and the older spec models.
"""
import os
import sys

import numpy as np


def write_model(directory, name, graph, opset):
    """Writes graph as NAME.onnx at `opset` (IR version 8, which Debian's onnx reads)."""
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    with open(os.path.join(directory, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def save_model(directory, name, nodes, inputs, outputs, opset):
    """Writes NAME.onnx (inputs and outputs typed from the arrays) and every array as .npy
    (outputs prefixed want_)."""
    from onnx import TensorProto, helper

    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
             np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float64): TensorProto.DOUBLE,
             np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8,
             np.dtype(np.uint64): TensorProto.UINT64}
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(n, types[v.dtype], v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, types[v.dtype], v.shape) for n, v in outputs.items()])
    write_model(directory, name, graph, opset)
    for n, v in {**inputs, **{"want_" + n: v for n, v in outputs.items()}}.items():
        np.save(os.path.join(directory, n + ".npy"), v)


def tfidf(directory):
    """TfIdfVectorizer on int32 token rows: 1- to 3-grams with up to one skipped token, in IDF
    and TFIDF modes with weights, and TF on a 1-D row with min_gram_length 2. The oracle counts
    by the spec's definition: an n-gram occurs at start i with skip k when tokens i, i+k+1,
    i+2(k+1), ... match it; unigrams are counted once, whatever the skip."""
    from onnx import helper

    rng = np.random.default_rng(5)
    rows = rng.integers(0, 4, (3, 9)).astype(np.int32)
    row = rows[0].copy()
    pool = {1: [(0,), (3,)], 2: [(1, 2), (2, 1), (0, 0)], 3: [(1, 2, 3), (3, 3, 0)]}
    pool_ints = [t for n in (1, 2, 3) for gram in pool[n] for t in gram]
    counts = [0, 2, 8]
    grams = [gram for n in (1, 2, 3) for gram in pool[n]]
    indexes = [6, 0, 1, 2, 4, 3, 5]  # output position of each pool n-gram
    weights = [0.5, 2.0, 1.5, 3.0, 0.25, 4.0, 1.0]
    max_skip = 1

    def frequencies(tokens, min_n, max_n):
        out = np.zeros(max(indexes) + 1)
        for p, gram in enumerate(grams):
            n = len(gram)
            if not min_n <= n <= max_n:
                continue
            found = 0
            for k in range(max_skip + 1 if n > 1 else 1):
                for i in range(len(tokens) - (n - 1) * (k + 1)):
                    found += all(tokens[i + j * (k + 1)] == gram[j] for j in range(n))
            out[indexes[p]] = found
        return out

    tf_rows = np.stack([frequencies(r, 1, 3) for r in rows])
    weight_at = np.zeros(max(indexes) + 1)
    weight_at[indexes] = weights
    idf = ((tf_rows > 0) * weight_at).astype(np.float32)
    tfidf = (tf_rows * weight_at).astype(np.float32)
    tf_row = frequencies(row, 2, 3).astype(np.float32)

    common = dict(max_skip_count=max_skip, ngram_counts=counts, ngram_indexes=indexes, pool_int64s=pool_ints)
    nodes = [
        helper.make_node("TfIdfVectorizer", ["rows"], ["idf"], mode="IDF", min_gram_length=1, max_gram_length=3,
                         weights=weights, **common),
        helper.make_node("TfIdfVectorizer", ["rows"], ["tfidf"], mode="TFIDF", min_gram_length=1, max_gram_length=3,
                         weights=weights, **common),
        helper.make_node("TfIdfVectorizer", ["row"], ["tf"], mode="TF", min_gram_length=2, max_gram_length=3, **common),
    ]
    save_model(directory, "tfidf", nodes, {"rows": rows, "row": row}, {"idf": idf, "tfidf": tfidf, "tf": tf_row}, 9)


def tfidf_strings(directory):
    """A TfIdfVectorizer whose pool is strings, which kiln refuses (it has no strings)."""
    from onnx import TensorProto, helper

    node = helper.make_node("TfIdfVectorizer", ["rows"], ["tf"], mode="TF", min_gram_length=1, max_gram_length=1,
                            max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_strings=["a", "b"])
    graph = helper.make_graph([node], "tfidf_strings", [helper.make_tensor_value_info("rows", TensorProto.INT32, [3, 9])],
                              [helper.make_tensor_value_info("tf", TensorProto.FLOAT, [3, 2])])
    write_model(directory, "tfidf_strings", graph, 9)


def as_parts(z):
    """A complex array as ONNX's [..., 2] real and imaginary parts, float32."""
    return np.stack([z.real, z.imag], axis=-1).astype(np.float32)


def spectral(directory):
    """DFT at opset 17 (a real signal zero-padded to dft_length 8 along axis 2, onesided; a
    complex one truncated to 5 points along axis 1, inverse) and at opset 20 (axis as an input,
    negative), and STFT of a real signal with a run-time Hann window: NumPy's FFT is the oracle."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)
    real = rng.standard_normal((2, 6, 5, 1)).astype(np.float32)
    parts = rng.standard_normal((2, 7, 3, 2)).astype(np.float32)
    complex_signal = parts[..., 0].astype(np.float64) + 1j * parts[..., 1]
    signal = rng.standard_normal((2, 40, 1)).astype(np.float32)
    window = np.hanning(12)[:10].astype(np.float32)  # any window: a run-time input
    frames = np.stack([signal[:, f * 6:f * 6 + 10, 0] * window for f in range(6)], axis=1)

    length = helper.make_tensor("length", TensorProto.INT64, [], [8])
    truncated = helper.make_tensor("truncated", TensorProto.INT64, [], [5])
    step = helper.make_tensor("step", TensorProto.INT64, [], [6])
    nodes = [
        helper.make_node("Constant", [], ["length"], value=length),
        helper.make_node("Constant", [], ["truncated"], value=truncated),
        helper.make_node("Constant", [], ["step"], value=step),
        helper.make_node("DFT", ["real", "length"], ["rfft"], axis=2, onesided=1),
        helper.make_node("DFT", ["parts", "truncated"], ["ifft"], axis=1, inverse=1),
        helper.make_node("STFT", ["signal", "step", "window"], ["stft"]),
    ]
    outputs = {"rfft": as_parts(np.fft.rfft(real[..., 0].astype(np.float64), n=8, axis=2)),
               "ifft": as_parts(np.fft.ifft(complex_signal, n=5, axis=1)),
               "stft": as_parts(np.fft.rfft(frames.astype(np.float64), axis=2))}
    save_model(directory, "spectral", nodes, {"real": real, "parts": parts, "signal": signal, "window": window}, outputs, 17)

    axis = helper.make_tensor("axis", TensorProto.INT64, [], [-3])
    nodes = [helper.make_node("Constant", [], ["axis"], value=axis),
             helper.make_node("DFT", ["parts", "", "axis"], ["fft"])]
    save_model(directory, "dft20", nodes, {"parts": parts}, {"fft": as_parts(np.fft.fft(complex_signal, axis=1))}, 20)


def empty_axes(directory):
    """ReduceSum whose axes input the model declares with a zero dim (so it is always empty: the
    default, every axis) and ReduceMax with noop_with_empty_axes, where empty axes mean none."""
    from onnx import helper

    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 2, 4)).astype(np.float32)
    nodes = [helper.make_node("ReduceSum", ["data", "axes"], ["total"], keepdims=1),
             helper.make_node("ReduceSum", ["data", "axes"], ["same"], noop_with_empty_axes=1)]
    save_model(directory, "empty_axes", nodes, {"data": data, "axes": np.zeros((0,), np.int64)},
               {"total": data.sum(keepdims=True), "same": data}, 13)


def control_flow(directory):
    """If with a run-time condition (both branches read an outer value; kiln computes both and
    picks), If with a constant condition whose branches differ in shape (only the taken one is
    imported), and Scan (opset 11) with a state and two scan inputs, one scanned along axis 1,
    the other in reverse, its output stacked along axis 1 in reverse; NumPy is the oracle.
    The If's expected output is written for both conditions (want_picked_true/false.npy)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    across = rng.standard_normal((3, 4)).astype(np.float32)  # scanned along axis 1: 4 steps of [3]
    down = rng.standard_normal((4, 3)).astype(np.float32)    # scanned along axis 0, last row first
    state = rng.standard_normal((3,)).astype(np.float32)
    f32 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    then_branch = helper.make_graph([helper.make_node("Add", ["x", "x"], ["doubled"])], "then", [], [f32("doubled", [2, 3])])
    else_branch = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["squared"])], "else", [], [f32("squared", [2, 3])])
    wide = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["wide"], axis=1)], "wide", [], [f32("wide", [2, 6])])
    tall = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["tall"], axis=0)], "tall", [], [f32("tall", [4, 3])])
    gain = np.array([0.5, 2.0, -1.0], np.float32)  # an initializer of the body: one parameter, not one per step
    body = helper.make_graph(  # (sum, a, b) -> (sum + a * b * gain, the same)
        [helper.make_node("Mul", ["a", "b"], ["product"]),
         helper.make_node("Mul", ["product", "gain"], ["scaled"]),
         helper.make_node("Add", ["sum_in", "scaled"], ["sum_out"]),
         helper.make_node("Identity", ["sum_out"], ["partial"])],
        "body", [f32("sum_in", [3]), f32("a", [3]), f32("b", [3])], [f32("sum_out", [3]), f32("partial", [3])],
        initializer=[helper.make_tensor("gain", TensorProto.FLOAT, [3], gain)])
    nodes = [
        helper.make_node("If", ["flag"], ["picked"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Constant", [], ["yes"], value=helper.make_tensor("yes", TensorProto.BOOL, [], [True])),
        helper.make_node("If", ["yes"], ["chosen"], then_branch=wide, else_branch=tall),
        helper.make_node("Scan", ["state", "across", "down"], ["final", "partials"], body=body, num_scan_inputs=2,
                         scan_input_axes=[1, 0], scan_input_directions=[0, 1], scan_output_axes=[1],
                         scan_output_directions=[1]),
    ]
    total, parts = state.astype(np.float64), []
    for t in range(4):
        total = total + across[:, t].astype(np.float64) * down[3 - t] * gain
        parts.append(total)
    outputs = {"picked": x + x, "chosen": np.concatenate([x, x], axis=1), "final": total.astype(np.float32),
               "partials": np.stack(parts[::-1], axis=1).astype(np.float32)}
    inputs = {"flag": np.array(True), "x": x, "state": state, "across": across, "down": down}
    save_model(directory, "control_flow", nodes, inputs, outputs, 11)
    np.save(os.path.join(directory, "no.npy"), np.array(False))
    np.save(os.path.join(directory, "picked_false.npy"), x * x)

    # A run-time condition whose branches disagree on shape: refused, naming both.
    graph = helper.make_graph([helper.make_node("If", ["flag"], ["either"], then_branch=wide, else_branch=tall)], "mismatch",
                              [helper.make_tensor_value_info("flag", TensorProto.BOOL, []), f32("x", [2, 3])], [f32("either", [2, 6])])
    write_model(directory, "if_mismatch", graph, 11)

    # An op kiln does not import, inside a branch: located inside it.
    nonzero = helper.make_graph([helper.make_node("NonZero", ["x"], ["where"], name="find")], "nonzero", [],
                                [helper.make_tensor_value_info("where", TensorProto.INT64, [2, 6])])
    graph = helper.make_graph([helper.make_node("If", ["flag"], ["either"], name="choose", then_branch=nonzero,
                                                else_branch=nonzero)], "unsupported",
                              [helper.make_tensor_value_info("flag", TensorProto.BOOL, []), f32("x", [2, 3])],
                              [helper.make_tensor_value_info("either", TensorProto.INT64, [2, 6])])
    write_model(directory, "if_unsupported", graph, 11)

    # A Scan of 300 steps whose body is a Scan of 300 steps of 4 nodes: each fits its own limit,
    # together they would inline 360,000 nodes; refused by the import's overall budget.
    inner_body = helper.make_graph(
        [helper.make_node("Add", ["s", "v"], ["t"]), helper.make_node("Mul", ["t", "v"], ["u"]),
         helper.make_node("Sub", ["u", "v"], ["w"]), helper.make_node("Identity", ["w"], ["s_out"])],
        "inner", [f32("s", [1]), f32("v", [1])], [f32("s_out", [1])])
    outer_body = helper.make_graph(
        [helper.make_node("Scan", ["acc", "row"], ["acc_out"], body=inner_body, num_scan_inputs=1)],
        "outer", [f32("acc", [1]), f32("row", [300, 1])], [f32("acc_out", [1])])
    graph = helper.make_graph([helper.make_node("Scan", ["init", "grid"], ["total"], body=outer_body, num_scan_inputs=1)],
                              "nested", [f32("init", [1]), f32("grid", [300, 300, 1])], [f32("total", [1])])
    write_model(directory, "scan_nested", graph, 11)

    # Scan-8 runs its body per batch element: 40,000 sequences of one step are 40,000 unrolled
    # bodies, over the cap even though each sequence is short.
    copy_body = helper.make_graph([helper.make_node("Identity", ["v"], ["w"])], "copy", [f32("v", [1])], [f32("w", [1])])
    graph = helper.make_graph([helper.make_node("Scan", ["", "rows"], ["copied"], body=copy_body, num_scan_inputs=1)],
                              "wide", [f32("rows", [40000, 1, 1])], [f32("copied", [40000, 1, 1])])
    write_model(directory, "scan8_wide", graph, 8)


def det(directory):
    """Det of a batch of 4x4 matrices, of a 5x5 one whose leading entry is 0 (elimination must
    pivot), and of a singular 3x3 one (determinant 0, no NaN); NumPy is the oracle."""
    from onnx import helper

    rng = np.random.default_rng(4)
    batch = rng.standard_normal((3, 4, 4)).astype(np.float32)
    pivoting = rng.standard_normal((5, 5)).astype(np.float32)
    pivoting[0, 0] = 0
    singular = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 5]], np.float32)
    nodes = [helper.make_node("Det", ["batch"], ["batch_det"]), helper.make_node("Det", ["pivoting"], ["pivoting_det"]),
             helper.make_node("Det", ["singular"], ["singular_det"])]
    outputs = {"batch_det": np.linalg.det(batch.astype(np.float64)).astype(np.float32),
               "pivoting_det": np.array(np.linalg.det(pivoting.astype(np.float64)), np.float32),
               "singular_det": np.array(0.0, np.float32)}
    save_model(directory, "det", nodes, {"batch": batch, "pivoting": pivoting, "singular": singular}, outputs, 11)


def bitshift(directory):
    """BitShift on uint8 (bits shifted out are lost: 200 << 1 is 144; a shift by 8 or more is 0)
    and uint64 (1 << 63 and right shifts of the top bit, exact), with broadcasting; NumPy (with
    its wrap-around) is the oracle."""
    from onnx import helper

    small = np.array([[200, 1, 255, 16], [3, 128, 7, 0]], np.uint8)
    small_shift = np.array([1, 7, 8, 200], np.uint8)
    big = np.array([1, 2**63, 2**64 - 1, 12345678901234567], np.uint64)
    big_shift = np.array([63, 63, 1, 64], np.uint64)

    def shifted(x, s, left):
        bits = 8 * x.dtype.itemsize
        out = np.where(s >= bits, 0, (x << np.minimum(s, bits - 1).astype(x.dtype)) if left else (x >> np.minimum(s, bits - 1).astype(x.dtype)))
        return out.astype(x.dtype)

    nodes = [helper.make_node("BitShift", ["small", "small_shift"], ["small_left"], direction="LEFT"),
             helper.make_node("BitShift", ["small", "small_shift"], ["small_right"], direction="RIGHT"),
             helper.make_node("BitShift", ["big", "big_shift"], ["big_left"], direction="LEFT"),
             helper.make_node("BitShift", ["big", "big_shift"], ["big_right"], direction="RIGHT")]
    inputs = {"small": small, "small_shift": small_shift, "big": big, "big_shift": big_shift}
    outputs = {"small_left": shifted(small, small_shift, True), "small_right": shifted(small, small_shift, False),
               "big_left": shifted(big, big_shift, True), "big_right": shifted(big, big_shift, False)}
    save_model(directory, "bitshift", nodes, inputs, outputs, 11)


def batchnorm_training(directory):
    """BatchNormalization with training_mode = 1 (opset 15): normalized by the batch's mean and
    population variance, the running mean and variance updated by momentum 0.8; NumPy is the
    oracle, as ONNX's reference computes it."""
    from onnx import helper

    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3, 5, 2)).astype(np.float32)
    scale, bias = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.random(3).astype(np.float32) + 0.5
    axes = (0, 2, 3)
    batch_mean, batch_var = x.astype(np.float64).mean(axis=axes), x.astype(np.float64).var(axis=axes)
    shape = (1, 3, 1, 1)
    y = (x - batch_mean.reshape(shape)) / np.sqrt(batch_var.reshape(shape) + 1e-3) * scale.reshape(shape) + bias.reshape(shape)
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "running_mean", "running_var"],
                            epsilon=1e-3, momentum=0.8, training_mode=1)
    outputs = {"y": y.astype(np.float32), "running_mean": (mean * 0.8 + batch_mean * 0.2).astype(np.float32),
               "running_var": (var * 0.8 + batch_var * 0.2).astype(np.float32)}
    save_model(directory, "batchnorm_training", [node], {"x": x, "scale": scale, "bias": bias, "mean": mean, "var": var},
               outputs, 15)


MODELS = {
    "batchnorm_training": batchnorm_training,
    "bitshift": bitshift,
    "det": det,
    "control_flow": control_flow,
    "empty_axes": empty_axes,
    "spectral": spectral,
    "tfidf": tfidf,
    "tfidf_strings": tfidf_strings,
}

if __name__ == "__main__":
    kind, directory = sys.argv[1], sys.argv[2]
    os.makedirs(directory, exist_ok=True)
    MODELS[kind](directory)
