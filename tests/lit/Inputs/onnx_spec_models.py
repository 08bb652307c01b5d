"""ONNX models for ops that no framework here exports, each with a NumPy oracle written from the
operator's specification (onnx.ai/onnx/operators), plus the inputs as .npy files.

Usage: onnx_spec_models.py KIND DIRECTORY (run with /usr/bin/python3: Debian's onnx, numpy).
onnx_models.py holds the models exported from PyTorch and the older spec models.
"""
import os
import sys

import numpy as np


def save_model(directory, name, nodes, inputs, outputs, opset, output_type=None):
    """Writes NAME.onnx (inputs and outputs typed from the arrays) and every array as .npy
    (outputs prefixed want_)."""
    from onnx import TensorProto, helper

    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
             np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float64): TensorProto.DOUBLE}
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(n, types[v.dtype], v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, types[v.dtype], v.shape) for n, v in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    with open(os.path.join(directory, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())
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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 8
    with open(os.path.join(directory, "tfidf_strings.onnx"), "wb") as f:
        f.write(model.SerializeToString())


def as_parts(z):
    """A complex array as ONNX's [..., 2] real and imaginary parts, float32."""
    return np.stack([z.real, z.imag], axis=-1).astype(np.float32)


def spectral(directory):
    """DFT at opset 17 (a real signal zero-padded to dft_length 8 along axis 2, onesided; a
    complex one truncated to 5 points along axis 1, inverse) and at opset 20 (axis as an input,
    negative), and STFT of a real signal with a run-time Hann window: NumPy's FFT is the oracle."""
    from onnx import TensorProto, helper, numpy_helper

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


MODELS = {
    "empty_axes": empty_axes,
    "spectral": spectral,
    "tfidf": tfidf,
    "tfidf_strings": tfidf_strings,
}

if __name__ == "__main__":
    kind, directory = sys.argv[1], sys.argv[2]
    os.makedirs(directory, exist_ok=True)
    MODELS[kind](directory)
