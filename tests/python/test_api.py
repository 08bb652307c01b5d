"""The Python package on small models: loading, running, errors, zero-copy, inspect, save.

Run by ctest (python_api) with PYTHONPATH=build/python and KILN_TEST_KILN=build/kiln, on the
host backend; KILN_TEST_WORK is a scratch directory.
"""
import json
import os
import pathlib
import pydoc
import subprocess

import numpy as np
import pytest

import kiln

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
KILN = os.environ.get("KILN_TEST_KILN", "kiln")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("api")


@pytest.fixture(scope="module")
def cnn():
    return kiln.load(EXAMPLES / "mnist_cnn.json", backend="host").compile()


@pytest.fixture(scope="module")
def mlp_dynamic(work):
    """mlp.json with its batch dim dynamic, up to 8."""
    model = json.loads((EXAMPLES / "mlp.json").read_text())
    model["dims"] = {"batch": 8}
    model["inputs"][0]["shape"][0] = "batch"
    path = work / "mlp_dynamic.json"
    path.write_text(json.dumps(model))
    return kiln.load(path, backend="host").compile()


def image(seed=0):
    return np.random.default_rng(seed).random((1, 1, 28, 28), dtype=np.float32)


def kiln_run(model_path, inputs, work, name):
    """`kiln run` on the same inputs: the CLI's outputs, by name."""
    out = work / name
    out.mkdir(exist_ok=True)
    flags = []
    for input_name, array in inputs.items():
        np.save(out / f"in_{input_name}.npy", array)
        flags += ["-i", f"{input_name}={out / f'in_{input_name}.npy'}"]
    subprocess.run([KILN, "run", str(model_path), "--backend=host", *flags, "-o", str(out)],
                   check=True, capture_output=True)
    return {p.stem: np.load(p) for p in out.glob("*.npy") if not p.stem.startswith("in_")}


def test_run_equals_kiln_run(cnn, work):
    x = image()
    probs = cnn(x)
    assert probs.shape == (1, 10) and probs.dtype == np.float32
    assert np.array_equal(probs, kiln_run(EXAMPLES / "mnist_cnn.json", {"image": x}, work, "cli")["probs"])
    # By name, and run() returning every output by name.
    assert np.array_equal(cnn(image=x), probs)
    assert list(cnn.run(image=x)) == ["probs"]


def test_model_describes_itself(cnn):
    assert cnn.name == "mnist_cnn"
    assert cnn.backend == "host"
    assert cnn.inputs == [kiln.TensorInfo("image", "f32", (1, 1, 28, 28))]
    assert cnn.outputs[0].name == "probs"
    assert "mnist_cnn(image: f32[1, 1, 28, 28]) -> (probs: f32[1, 10])" in repr(cnn)


def test_inputs_are_read_in_place(cnn):
    """A C-contiguous f32 array goes in without a copy; another layout or dtype is converted
    (once, counted); outputs own their memory through a capsule (not copied either)."""
    x = image(1)
    before = kiln._kiln.copy_stats()
    expected = cnn(x)
    assert kiln._kiln.copy_stats() == before
    strided = np.ascontiguousarray(np.swapaxes(x, 2, 3)).swapaxes(2, 3)  # same values, transposed layout
    assert not strided.flags.c_contiguous
    assert np.array_equal(cnn(strided), expected)
    after = kiln._kiln.copy_stats()
    assert after["input_copies"] == before["input_copies"] + 1
    assert after["input_bytes_copied"] == before["input_bytes_copied"] + x.nbytes
    # f64 data rounds to the f32 input (a conversion, counted).
    assert np.array_equal(cnn(x.astype(np.float64)), expected)
    assert not expected.flags.owndata and expected.base is not None


def test_torch_tensors_in_and_out(cnn):
    torch = pytest.importorskip("torch")
    x = image(2)
    out = cnn(torch.from_numpy(x))
    assert isinstance(out, torch.Tensor)
    assert np.array_equal(out.numpy(), cnn(x))
    # A tensor that is not contiguous goes through DLPack and a conversion.
    wide = torch.from_numpy(np.concatenate([x, x], axis=3))[:, :, :, ::2]
    assert np.array_equal(cnn(wide).numpy(), cnn(np.ascontiguousarray(wide.numpy())))


def test_dynamic_batch(mlp_dynamic):
    x = np.random.default_rng(3).standard_normal((3, 784)).astype(np.float32)
    rows = mlp_dynamic(x)
    assert rows.shape[0] == 3
    for r in range(3):
        np.testing.assert_allclose(mlp_dynamic(x[r:r + 1])[0], rows[r], rtol=1e-6, atol=1e-6)
    assert mlp_dynamic.inputs[0].dynamic_dims == ("batch", "")


def test_keras_model(work):
    # The Keras seed CNN (model.to_json() form, seeded weights), as kiln run takes it.
    path = EXAMPLES / "mnist_cnn_keras.json"
    model = kiln.load(path, backend="host")
    x = np.random.default_rng(6).random(model.inputs[0].shape, dtype=np.float32)
    got = model(x)
    assert np.array_equal(got, next(iter(kiln_run(path, {model.inputs[0].name: x}, work, "keras").values())))


def test_onnx_model_with_a_dynamic_batch(work):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    rng = np.random.default_rng(7)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y0"]), helper.make_node("Relu", ["y0"], ["y"])],
        "onnx_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, [6, 3], w.flatten().tolist())])
    path = work / "dense.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    model = kiln.load(path, backend="host", dynamic_dims={"batch": 4})
    assert model.inputs[0].shape == (4, 6) and model.inputs[0].dynamic_dims[0] == "batch"
    x = rng.standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(model(x), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    fixed = kiln.load(path, backend="host", input_shapes={"x": [2, 6]})
    assert fixed.inputs[0].shape == (2, 6)
    with pytest.raises(kiln.LoadError, match=r"input 'x': error: dimension 0 is 'batch'(.|\n)*note: from Python: kiln.load\(path, input_shapes="):
        kiln.load(path, backend="host").compile()


def test_errors_are_kiln_errors(cnn, work):
    with pytest.raises(kiln.LoadError, match="no such file"):
        kiln.load(work / "missing.json")
    bad = work / "bad.json"
    bad.write_text('{"format": "kiln.model", "version": 1, "name": "m", "inputs": 3}')
    with pytest.raises(kiln.LoadError) as caught:
        kiln.load(bad).compile(backend="host")
    assert caught.value.location.startswith(str(bad)) and "error:" in str(caught.value)
    with pytest.raises(kiln.InputError, match=r"input 'image': error: expected f32\[1,1,28,28\], got f32\[3,3\]"):
        cnn(np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError):  # InputError is a ValueError too
        cnn(np.zeros((3, 3), np.float32))
    with pytest.raises(kiln.InputError, match="no such input"):
        cnn.run(image=image(), label=np.zeros(1))
    with pytest.raises(kiln.InputError, match="'image'.*not given"):
        cnn.run({})
    with pytest.raises(kiln.InputError, match="2 inputs given"):
        cnn(image(), image())
    with pytest.raises(kiln.LoadError, match="not one of auto, cuda, host"):
        kiln.load(EXAMPLES / "mnist_cnn.json", backend="tpu").compile()
    if not os.path.exists("/dev/nvidia0"):
        with pytest.raises(kiln.LoadError, match=r"^backend='cuda': error: .*; use backend='host' to run on the CPU$"):
            kiln.load(EXAMPLES / "mnist_cnn.json", backend="cuda").compile()
    with pytest.raises(kiln.LoadError, match="not one of f32, tf32"):
        kiln.load(EXAMPLES / "mnist_cnn.json", backend="host", precision="f8").compile()
    with pytest.raises(kiln.LoadError, match="not an ONNX or Keras model"):
        kiln.load(EXAMPLES / "mnist_cnn.json", input_shapes={"image": [2, 1, 28, 28]}).compile()
    with pytest.raises(kiln.TrainError, match="label 10, outside"):
        cnn.fit(np.zeros((64, 1, 28, 28), np.float32), np.full(64, 10), verbose=False)
    with pytest.raises(kiln.TrainError, match=r"y: error: labels must be class indices .* got 1.5"):
        cnn.fit(np.zeros((64, 1, 28, 28), np.float32), np.full(64, 1.5), verbose=False)
    with pytest.raises(kiln.LoadError, match="not one of mnist, fashion-mnist"):
        kiln.load_dataset("cifar")
    assert issubclass(kiln.InputError, kiln.Error)


@pytest.mark.parametrize("value, message", [
    (None, "is None, not an array"),
    ("abc", r"not an array of numbers \(NumPy dtype <U3\)"),
    (np.array([object()]), r"not an array of numbers \(NumPy dtype object\)"),
    (np.zeros((1, 1, 28, 28), np.complex64), "complex64"),
    ([[1], [2, 3]], "is not an array"),
    (np.float32(3), r"expected f32\[1,1,28,28\], got f32\[\]"),
])
def test_bad_inputs_are_input_errors(cnn, value, message):
    with pytest.raises(kiln.InputError, match=r"^input 'image': error: .*" + message):
        cnn(value)


def test_fit_errors_name_its_arguments(cnn):
    x, y = np.zeros((64, 1, 28, 28), np.float32), np.zeros(64, np.int32)
    with pytest.raises(kiln.TrainError, match=r"^epochs: error: must be >= 1, got 0$"):
        cnn.fit(x, y, epochs=0, verbose=False)
    with pytest.raises(kiln.TrainError, match=r"^batch_size: error: 65 is larger than the 64 training samples$"):
        cnn.fit(x, y, batch_size=65, verbose=False)
    with pytest.raises(kiln.TrainError, match=r"^optimizer: error: expected sgd, adam or adamw"):
        cnn.fit(x, y, optimizer="adamx", verbose=False)
    with pytest.raises(kiln.TrainError, match=r"^y: error: 63 labels for 64 samples"):
        cnn.fit(x, y[:63], verbose=False)
    with pytest.raises(kiln.TrainError, match=r"^x: error: .*samples are \[28,28\]"):
        cnn.fit(x[:, 0], y, verbose=False)
    with pytest.raises(kiln.InputError, match=r"^x: error: is None"):
        cnn.fit(None, y, verbose=False)


def test_inspect_report(cnn):
    report = cnn.inspect()
    assert report["graph"] == "mnist_cnn"
    assert report["totals"]["kernels"] == len(report["kernels"]) > 0
    assert report["totals"]["flops"] > 0
    assert "memory" in report and "pipeline" in report


def test_save_writes_a_package(cnn, work):
    path = work / "cnn.kiln"
    cnn.save(path)
    x = image(4)
    package = kiln.load(path, backend="host")
    assert np.array_equal(package(x), cnn(x))
    assert np.array_equal(kiln_run(path, {"image": x}, work, "cli_package")["probs"], cnn(x))
    with pytest.raises(kiln.LoadError):
        cnn.save(work / "no" / "such" / "dir" / "cnn.kiln")


def test_parameters_round_trip(work):
    model = kiln.load(EXAMPLES / "mlp.json", backend="host")
    x = np.random.default_rng(5).standard_normal((4, 784)).astype(np.float32)
    before = model(x)
    params = model.parameters()
    assert "fc1.bias" in params and params["fc1.bias"].shape == (128,)
    model.set_parameters({"fc1.bias": params["fc1.bias"] + 1.0})
    assert not np.array_equal(model(x), before)
    model.set_parameters({"fc1.bias": params["fc1.bias"]})
    assert np.array_equal(model(x), before)
    with pytest.raises(kiln.InputError, match="no such parameter"):
        model.set_parameters({"fc9.bias": params["fc1.bias"]})
    with pytest.raises(kiln.InputError, match=r"expected f32\[128\]"):
        model.set_parameters({"fc1.bias": np.zeros(3, np.float32)})


def test_training_step_model(work):
    # Compiled with a training step: train_step takes optimizer steps, runs use the new weights,
    # save writes a training package that loads (and trains) again.
    model = kiln.load(EXAMPLES / "mnist_cnn.json", backend="host", train_batch_size=4).compile()
    rng = np.random.default_rng(8)
    batch = rng.random((4, 1, 28, 28), dtype=np.float32)
    labels = np.array([1, 7, 3, 3], np.int32)
    before = model(batch)
    losses = [model.train_step(batch, labels) for _ in range(3)]
    assert losses[2] < losses[0], losses
    after = model(batch)
    assert after.shape == (4, 10) and not np.array_equal(after, before)
    assert set(model.parameters()) >= {"conv1.weight", "fc2.bias"}
    path = work / "train.kiln"
    model.save(path)
    again = kiln.load(path, backend="host")
    assert np.array_equal(again(batch), after)
    assert again.train_step(batch, labels) == pytest.approx(model.train_step(batch, labels), rel=0, abs=0)
    with pytest.raises(kiln.TrainError, match="no training step"):
        kiln.load(EXAMPLES / "mlp.json", backend="host").train_step(batch, labels)


def test_cache_info():
    info = kiln.cache_info()
    if "KILN_CACHE_DIR" in os.environ:
        assert info.directory == os.environ["KILN_CACHE_DIR"]
    assert info.entries > 0 and info.bytes > 0  # the models above were compiled through it


def test_help_documents_the_api():
    text = pydoc.render_doc(kiln, renderer=pydoc.plaintext)
    for name in ("load", "compile", "Model", "fit", "inspect", "cache_info", "InputError"):
        assert name in text
    assert "validation_data" in pydoc.render_doc(kiln.Model.fit, renderer=pydoc.plaintext)
