"""The Python package against PyTorch and the CLI: kiln.compile on torchvision's ResNet-18,
Model.fit on MNIST against `kiln train`, the GIL released during long calls, Ctrl-C.

Run by ctest (python_torch_fit, label python and slow) with PYTHONPATH=build/python and
KILN_TEST_KILN=build/kiln, on the host backend.
"""
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
KILN = os.environ.get("KILN_TEST_KILN", "kiln")
TRAIN, TEST = 2000, 250  # MNIST samples for the fit/CLI comparison


def test_resnet18_equals_pytorch():
    torch.manual_seed(0)
    net = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 224, 224)
    fast = kiln.compile(net, [x], backend="host")
    out = fast(x)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 1000)
    with torch.no_grad():
        ref = net(x)
    # f32 both ways; the sums run in another order (kiln's tiles, PyTorch's oneDNN): the
    # difference is a few ulps of the largest logit per layer, 18 layers deep.
    scale = ref.abs().max().item()
    assert (out - ref).abs().max().item() <= 1e-5 * scale
    assert out.argmax().item() == ref.argmax().item()
    # Called as the module is: by keyword too; and its signature is forward()'s.
    assert torch.equal(fast(x=x), out)
    assert list(fast.__signature__.parameters) == ["x"]
    report = fast.model.inspect()
    assert report["totals"]["kernels"] < report["totals"]["kernels_before_fusion"]


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, a, b):
        return torch.relu(self.fc(a)) + b, self.fc(a).sum(dim=1)


def test_compile_specializes_and_recompiles_on_new_shapes():
    torch.manual_seed(1)
    module = TwoInputs()
    fast = kiln.compile(module, [torch.randn(2, 8), torch.randn(2, 4)], backend="host")
    for batch in (2, 5, 2):
        a, b = torch.randn(batch, 8), torch.randn(batch, 4)
        got = fast(a, b=b)
        with torch.no_grad():
            want = module(a, b)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert len(fast._models) == 2  # batch 2 compiled once, batch 5 once
    with pytest.raises(kiln.InputError, match="torch tensors"):
        fast(np.zeros((2, 8), np.float32), torch.zeros(2, 4))
    # max_batch: the batch dim dynamic, one compile for every batch up to it.
    dynamic = kiln.compile(module, [torch.randn(2, 8), torch.randn(2, 4)], backend="host", max_batch=8)
    for batch in (2, 5, 8, 1):
        a, b = torch.randn(batch, 8), torch.randn(batch, 4)
        with torch.no_grad():
            want = module(a, b)
        for g, w in zip(dynamic(a, b), want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert len(dynamic._models) == 1
    assert dynamic.model.inputs[0].dynamic_dims[0] == "batch" and dynamic.model.inputs[0].shape == (8, 8)


@pytest.fixture(scope="module")
def mnist():
    return kiln.load_dataset("mnist", "train", first=TRAIN), kiln.load_dataset("mnist", "test", first=TEST)


def test_fit_equals_kiln_train_and_releases_the_gil(mnist, tmp_path):
    (x, y), (xt, yt) = mnist
    assert x.shape == (TRAIN, 1, 28, 28) and y.dtype == np.int32
    model = kiln.load(EXAMPLES / "mnist_cnn.json", backend="host").compile()
    result = {}
    # fit in a thread while this one counts: with the GIL held during fit the count would stall.
    thread = threading.Thread(target=lambda: result.update(
        history=model.fit(x, y, epochs=1, batch_size=64, validation_data=(xt, yt),
                          checkpoint=str(tmp_path / "ckpt.safetensors"), verbose=False)))
    count = 0
    thread.start()
    while thread.is_alive():
        count += 1
    thread.join()
    history = result["history"]
    assert count > 100_000, f"the main thread ran {count} iterations during fit"
    assert history.steps == TRAIN // 64
    assert set(history.history) == {"loss", "accuracy", "val_accuracy"}

    cli = subprocess.run([KILN, "train", str(EXAMPLES / "mnist_cnn.json"), "--backend=host",
                          f"--train-samples={TRAIN}", f"--test-samples={TEST}", "--batch-size=64"],
                         check=True, capture_output=True, text=True).stdout
    loss = float(re.search(r"final loss ([0-9.]+)", cli).group(1))
    accuracy = float(re.search(r"test accuracy ([0-9.]+)%", cli).group(1))
    # The same batches in the same order through the same kernels: the same figures.
    assert f"{history.history['loss'][0]:.4f}" == f"{loss:.4f}"
    assert f"{100 * history.history['val_accuracy'][0]:.2f}" == f"{accuracy:.2f}"
    assert accuracy > 50

    # The trained weights are the model's now: its predictions score what fit's evaluation did
    # (another program of the same weights: a sum order may flip a near tie, so 2 of 250).
    predicted = np.array([model(xt[i:i + 1]).argmax() for i in range(TEST)])
    assert abs(np.mean(predicted == yt) - history.history["val_accuracy"][0]) <= 2 / TEST
    assert (tmp_path / "ckpt.safetensors").stat().st_size > 0


def test_fit_prints_progress(mnist, capsys):
    (x, y), _ = mnist
    model = kiln.load(EXAMPLES / "mnist_cnn.json", backend="host").compile()
    history = model.fit(x[:256], y[:256], epochs=2, batch_size=64)
    out = capsys.readouterr().out
    assert "epoch 1/2" in out and "epoch 2/2: loss" in out and "[====" in out
    assert "val_accuracy" not in history.history and len(history.history["loss"]) == 2


def test_calls_during_a_fit_wait_for_it(mnist):
    # One model runs one call at a time: a call from another thread waits for the fit (whose
    # progress output takes the GIL: no deadlock), or runs before it starts.
    (x, y), _ = mnist
    model = kiln.load(EXAMPLES / "mnist_cnn.json", backend="host").compile()
    thread = threading.Thread(target=lambda: model.fit(x[:512], y[:512], batch_size=64))
    thread.start()
    time.sleep(0.5)
    probs = model(x[:1])
    assert model.inputs[0].name == "image" and probs.shape == (1, 10)
    thread.join(timeout=300)
    assert not thread.is_alive()


def test_ctrl_c_stops_fit_cleanly(tmp_path):
    script = tmp_path / "long_fit.py"
    script.write_text(textwrap.dedent(f"""
        import sys, kiln
        x, y = kiln.load_dataset("mnist", "train", first=4096)
        model = kiln.load({str(EXAMPLES / 'mnist_cnn.json')!r}, backend="host").compile()
        print("fitting", flush=True)
        try:
            model.fit(x, y, epochs=50, batch_size=64, verbose=False,
                      checkpoint={str(tmp_path / 'stopped.safetensors')!r})
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            sys.exit(3)
        print("finished", flush=True)
    """))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ))
    assert process.stdout.readline().strip() == "fitting"
    time.sleep(3)  # compiled (cached) and a few steps in
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 3, out
    assert "KeyboardInterrupt" in out
    assert (tmp_path / "stopped.safetensors").stat().st_size > 0
