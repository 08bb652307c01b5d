"""kiln.compile: a PyTorch module through torch.onnx.export into a kiln model, called as the module."""

from __future__ import annotations

import functools
import inspect
import os
import tempfile
from typing import Any, Dict, List, Sequence, Tuple

from ._errors import InputError, LoadError
from ._model import Model


def _signature(module: Any) -> Tuple[List[str], inspect.Signature]:
    """The names of the module's forward() parameters (the ONNX inputs), and its signature."""
    signature = inspect.signature(module.forward)
    names = [p.name for p in signature.parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, signature


class CompiledModule:
    """A PyTorch module compiled by kiln, called with the module's signature on torch tensors.

    Like torch.compile, it specializes on the input shapes and dtypes: a call with new ones
    exports and compiles again (each compile is cached on disk too). With ``max_batch`` the
    first dim of every input is dynamic instead: one compile serves every batch up to it (as
    ``torch.compile(dynamic=True)`` would). Inference only: the module's weights are taken as
    they are when compiled.
    """

    def __init__(self, module: Any, example_inputs: Sequence[Any], options: Dict[str, Any]) -> None:
        import torch  # noqa: F401  (a clear ImportError when PyTorch is missing)

        self.module = module
        self._options = dict(options)
        self._opset = int(self._options.pop("opset", 17))
        self._max_batch = int(self._options.pop("max_batch", 0))
        self._names, self.__signature__ = _signature(module)
        self._models: Dict[Tuple, Model] = {}
        self._directory = tempfile.TemporaryDirectory(prefix="kiln-compile-")
        functools.update_wrapper(self, module.forward, updated=())
        self._model_for(tuple(example_inputs))

    def _key(self, args: Tuple[Any, ...]) -> Tuple:
        # With max_batch, one compile serves every batch up to it: the batch is not in the key.
        def shape(a: Any) -> Tuple:
            dims = tuple(a.shape)
            return dims[1:] if self._max_batch and dims and dims[0] <= self._max_batch else dims
        return tuple((shape(a), str(a.dtype)) for a in args)

    def _model_for(self, args: Tuple[Any, ...]) -> Model:
        import torch

        for a in args:
            if not isinstance(a, torch.Tensor):
                raise InputError("kiln.compile", f"inputs must be torch tensors, got {type(a).__name__}")
        key = self._key(args)
        model = self._models.get(key)
        if model is not None:
            return model
        if len(args) > len(self._names):
            raise InputError("kiln.compile", f"{len(args)} inputs given, forward() takes {len(self._names)}")
        path = os.path.join(self._directory.name, f"model_{len(self._models)}.onnx")
        was_training = self.module.training
        self.module.eval()
        names = self._names[:len(args)]
        dynamic = self._max_batch and all(a.dim() > 0 and a.shape[0] <= self._max_batch for a in args)
        try:
            with torch.no_grad():
                torch.onnx.export(self.module, args, path, input_names=names,
                                  opset_version=self._opset, do_constant_folding=True,
                                  dynamic_axes={n: {0: "batch"} for n in names} if dynamic else None)
        except Exception as error:  # torch's exporter raises many types
            raise LoadError(type(self.module).__name__,
                            f"torch.onnx.export failed: {error}") from error
        finally:
            self.module.train(was_training)
        options = dict(self._options)
        if dynamic:
            options["dynamic_dims"] = {"batch": self._max_batch}
        model = Model(path, _keep=self._directory, **options).compile()
        self._models[key] = model
        return model

    @property
    def model(self) -> Model:
        """The kiln model of the first compile (for inspect(), save(), ...)."""
        return next(iter(self._models.values()))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.__signature__.bind(*args, **kwargs)
        ordered = tuple(bound.arguments[name] for name in self._names if name in bound.arguments)
        model = self._model_for(ordered)
        outputs = model(*ordered)
        return outputs


def compile(module: Any, example_inputs: Sequence[Any], **options: Any) -> CompiledModule:
    """Compiles a PyTorch module for inference: a drop-in for ``torch.compile(module)``.

    The module is exported with ``torch.onnx.export`` at the shapes of ``example_inputs`` (a
    list of tensors, one per forward() argument) and compiled by kiln. The result is called
    like the module and returns torch tensors. Options are ``kiln.load``'s (``backend``,
    ``precision``, ``arch``, ``opt_level``, ``cache``), ``opset`` (17) and ``max_batch`` (0:
    static shapes; N: the batch dim of every input dynamic up to N, one compile for all).
    """
    return CompiledModule(module, example_inputs, options)
