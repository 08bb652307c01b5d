"""kiln: an ahead-of-time compiler for deep-learning graphs on CUDA, from Python.

Load a model (kiln JSON, ONNX, Keras/TensorFlow.js, or a package from ``kiln compile``),
compile it, run it on NumPy arrays or PyTorch tensors, train it::

    import kiln
    model = kiln.load("mnist_cnn.json").compile(backend="host")
    probs = model(images)                       # NumPy in, NumPy out
    history = model.fit(x, y, epochs=1, batch_size=64, validation_data=(xt, yt))
    model.save("mnist.kiln")

Or compile a PyTorch module, as torch.compile would (inference)::

    fast = kiln.compile(torchvision.models.resnet18().eval(), [torch.randn(1, 3, 224, 224)])
    logits = fast(torch.randn(1, 3, 224, 224))  # a torch.Tensor

Errors are ``kiln.Error`` (``LoadError``, ``InputError``, ``TrainError``) carrying the
location and message the ``kiln`` tool prints. Compiling, running and training release the
GIL; Ctrl-C stops ``fit`` after the step in flight (KeyboardInterrupt). docs/python.md has more.
"""

from __future__ import annotations

from ._errors import Error, InputError, LoadError, TrainError
from ._model import CacheInfo, History, Model, TensorInfo, cache_info, load, load_dataset
from ._torch import CompiledModule, compile

__version__ = "0.1.0"

__all__ = [
    "CacheInfo", "CompiledModule", "Error", "History", "InputError", "LoadError", "Model",
    "TensorInfo", "TrainError", "cache_info", "compile", "load", "load_dataset",
]

# help(kiln) lists what the package defines, and these are defined in its private modules.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
