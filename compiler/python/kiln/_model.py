"""kiln.Model: a model file or package, compiled on first use, run on arrays, trained with fit."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _kiln
from ._errors import InputError, LoadError, TrainError, raising

ArrayLike = Any  # a NumPy array, a PyTorch tensor, or anything np.asarray takes


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a model: its name, dtype ("f32", "i32", ...) and shape.

    A dynamic dim (``dynamic_dims[d]`` names it, e.g. "batch") takes any size from 1 to
    ``shape[d]``.
    """

    name: str
    dtype: str
    shape: Tuple[int, ...]
    dynamic_dims: Tuple[str, ...] = ()


@dataclass
class History:
    """What ``Model.fit`` returns, in the Keras style: ``history["loss"]`` per epoch."""

    history: Dict[str, List[float]] = field(default_factory=dict)
    epochs: List[Dict[str, float]] = field(default_factory=list)  # every figure, per epoch
    steps: int = 0
    seconds: float = 0.0  # training time (compilation and evaluation excluded)


@dataclass(frozen=True)
class CacheInfo:
    """The kernel and package cache: its directory ($KILN_CACHE_DIR, else ~/.cache/kiln),
    entry count, size and size limit ($KILN_CACHE_MAX_SIZE; 0: none)."""

    directory: str
    entries: int
    bytes: int
    max_bytes: int


def _is_torch(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _to_numpy(value: ArrayLike, what: str) -> np.ndarray:
    """`value` as a NumPy array of numbers, sharing its memory where it can (PyTorch through
    DLPack); an InputError naming `what` for anything else (None, strings, objects, complex)."""
    array = _as_array(value, what)
    if array.dtype.kind not in "biuf":  # bool, int, unsigned, float
        raise InputError(what, f"is not an array of numbers (NumPy dtype {array.dtype})")
    return array


def _as_array(value: ArrayLike, what: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if _is_torch(value):
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()  # kiln takes host memory; the CUDA backend uploads it
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()  # NumPy has no bfloat16: kiln rounds the f32 data back
        try:
            return np.from_dlpack(tensor)
        except (TypeError, RuntimeError, BufferError):
            return tensor.numpy()
    if hasattr(value, "__dlpack__"):
        return np.from_dlpack(value)
    if value is None:
        raise InputError(what, "is None, not an array")
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as error:
        raise InputError(what, f"is not an array: {error}") from None


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# kiln train's flags, as fit's errors name them, and fit's arguments they are.
_FIT_FLAGS = {"--epochs": "epochs", "--batch-size": "batch_size", "--optimizer": "optimizer",
              "--lr": "lr", "--momentum": "momentum", "--weight-decay": "weight_decay",
              "--seed": "seed", "--data": "x", "--checkpoint": "checkpoint", "--resume": "resume"}


class Model:
    """A model file (kiln JSON, ONNX, Keras/TensorFlow.js, textual IR) or a package.

    Made by ``kiln.load``. It compiles on first use with the options given to ``load`` (or
    explicitly with ``compile``); compiled kernels and packages are cached on disk, so loading
    the same model again takes milliseconds.
    """

    def __init__(self, path: Union[str, os.PathLike], *,
                 input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 dynamic_dims: Optional[Mapping[str, int]] = None,
                 opt_level: int = 1, cache: bool = True, backend: str = "auto",
                 precision: str = "f32", arch: Union[str, Sequence[str]] = ("sm_80", "sm_90"),
                 train_batch_size: int = 0, _keep: Any = None) -> None:
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise LoadError(self.path, "no such file")
        self._import = {
            "input_shapes": {k: [int(d) for d in v] for k, v in (input_shapes or {}).items()},
            "dynamic_dims": {k: int(v) for k, v in (dynamic_dims or {}).items()},
        }
        self._opt_level = int(opt_level)
        self._cache = bool(cache)
        self._compile_options = {"backend": backend, "precision": precision,
                                 "arch": [arch] if isinstance(arch, str) else list(arch),
                                 "train_batch_size": int(train_batch_size)}
        self._compiled: Optional[_kiln.Model] = None
        self._keep = _keep  # what the file's life depends on (kiln.compile's temporary directory)

    # --- compiling -------------------------------------------------------------------------
    def compile(self, backend: Optional[str] = None, precision: Optional[str] = None,
                arch: Union[str, Sequence[str], None] = None,
                train_batch_size: Optional[int] = None) -> "Model":
        """Compiles the model (or loads the package) and returns it.

        backend: "auto" (the GPU when there is one), "cuda" or "host" (the generated CUDA
          kernels on the CPU). precision: "f32" (exact), or "tf32", "bf16", "f16" (tensor cores on the GPU).
        arch: the GPU architectures to build cubins for ("sm_80", "sm_90", ...).
        train_batch_size: > 0 also compiles a training step (``train_step``).
        """
        if backend is not None:
            self._compile_options["backend"] = backend
        if precision is not None:
            self._compile_options["precision"] = precision
        if arch is not None:
            self._compile_options["arch"] = [arch] if isinstance(arch, str) else list(arch)
        if train_batch_size is not None:
            self._compile_options["train_batch_size"] = int(train_batch_size)
        o = self._compile_options
        try:
            with raising(LoadError):
                self._compiled = _kiln.load(self.path, o["backend"], self._cache, self._opt_level,
                                            o["arch"], o["precision"], self._import["input_shapes"],
                                            self._import["dynamic_dims"], o["train_batch_size"], "")
        except LoadError as error:
            if error.location == "kiln::Backend::Cuda":  # the C++ API's words, in Python's
                message = error.message.replace("kiln::Backend::Host", "backend='host'")
                raise LoadError("backend='cuda'", message, error.notes) from None
            if "--input-shape" in error.message:  # the CLI's words; say the Python ones too
                error.notes.append("from Python: kiln.load(path, input_shapes={input: shape}) "
                                   "or dynamic_dims={dim: bound}")
                error.text += "\nnote: " + error.notes[-1]
            raise
        self._describe()
        return self

    def _describe(self) -> None:
        # Read once per compile: model(x) runs on these, not on a fresh list per call.
        assert self._compiled is not None
        self._input_names = [i["name"] for i in self._compiled.inputs]
        self._output_names = [o["name"] for o in self._compiled.outputs]
        self._bf16_outputs = {o["name"] for o in self._compiled.outputs if o["dtype"] == "bf16"}

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def _model(self) -> _kiln.Model:
        if self._compiled is None:
            self.compile()
        assert self._compiled is not None
        return self._compiled

    # --- what it is ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The graph's name."""
        return self._model().name

    @property
    def backend(self) -> str:
        """Where it runs: "host" or "cuda"."""
        return self._model().backend

    @property
    def inputs(self) -> List[TensorInfo]:
        return [TensorInfo(i["name"], i["dtype"], tuple(i["shape"]), tuple(i["dynamic_dims"]))
                for i in self._model().inputs]

    @property
    def outputs(self) -> List[TensorInfo]:
        return [TensorInfo(i["name"], i["dtype"], tuple(i["shape"]), tuple(i["dynamic_dims"]))
                for i in self._model().outputs]

    def __repr__(self) -> str:
        if self._compiled is None:
            return f"kiln.Model({self.path!r}, not compiled)"
        ins = ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in self.inputs)
        outs = ", ".join(f"{o.name}: {o.dtype}{list(o.shape)}" for o in self.outputs)
        return f"kiln.Model({self.path!r}, {self.name}({ins}) -> ({outs}), backend={self.backend})"

    # --- running ---------------------------------------------------------------------------
    def run(self, inputs: Optional[Mapping[str, ArrayLike]] = None, /,
            **named: ArrayLike) -> Dict[str, Any]:
        """Runs on inputs by name; returns every output by name.

        Arrays are NumPy arrays or PyTorch tensors (through DLPack); a C-contiguous array of the
        input's dtype is read in place, without a copy. Outputs are NumPy arrays, or torch
        tensors (on the inputs' device) when the inputs were.
        """
        given = dict(inputs or {})
        given.update(named)
        torch_in = next((v for v in given.values() if _is_torch(v)), None)
        arrays = {name: _to_numpy(value, f"input '{name}'") for name, value in given.items()}
        model = self._model()
        with raising(InputError):
            result = model.run(arrays)
        for name in self._bf16_outputs:
            result[name] = _bf16_to_f32(result[name])
        if torch_in is not None:
            import torch
            # On the device the inputs came from (a CUDA tensor's data was copied to the host).
            device = torch_in.device
            result = {name: torch.from_numpy(array) for name, array in result.items()}
            if device.type != "cpu":
                result = {name: tensor.to(device) for name, tensor in result.items()}
        return result

    def __call__(self, *args: ArrayLike, **named: ArrayLike) -> Any:
        """``model(x)``: inputs in order (or by name); the output, or a tuple of them."""
        self._model()
        names = self._input_names
        if len(args) > len(names):
            raise InputError(self.path, f"{len(args)} inputs given, the model takes {len(names)}")
        given = dict(zip(names, args))
        for name in named:
            if name in given:
                raise InputError(f"input '{name}'", "given twice (by position and by name)")
        given.update(named)
        result = self.run(given)
        values = [result[name] for name in self._output_names]
        return values[0] if len(values) == 1 else tuple(values)

    # --- training --------------------------------------------------------------------------
    def fit(self, x: ArrayLike, y: ArrayLike, *, epochs: int = 1, batch_size: int = 64,
            optimizer: str = "adam", lr: float = 1e-3, momentum: float = 0.0,
            weight_decay: Optional[float] = None, seed: int = 0,
            validation_data: Optional[Tuple[ArrayLike, ArrayLike]] = None,
            checkpoint: Optional[str] = None, resume: Optional[str] = None,
            verbose: bool = True) -> History:
        """Trains on samples ``x`` ([N, ...], the model's input) and integer labels ``y`` ([N]).

        As ``kiln train`` does: shuffled batches (seeded), the optimizer ("sgd", "adam",
        "adamw"), evaluation on ``validation_data`` after every epoch, a checkpoint after every
        epoch when asked for. ``verbose`` draws a progress bar and a line per epoch. The trained
        parameters become this model's. Ctrl-C stops after the step in flight
        (KeyboardInterrupt; the checkpoint is written first).
        """
        if validation_data is not None and len(validation_data) != 2:
            raise TrainError("validation_data", "expected (x, y)")
        val_x = val_y = None
        if validation_data is not None:
            val_x = _to_numpy(validation_data[0], "validation x")
            val_y = _to_numpy(validation_data[1], "validation y")
        labels = _to_numpy(y, "y")
        for what, array in (("y", labels), ("validation y", val_y)):
            # Class indices given as floats convert exactly, or not at all (never truncated).
            if array is not None and array.dtype.kind == "f" and not np.all(np.mod(array, 1) == 0):
                raise TrainError(what, "labels must be class indices (whole numbers); got "
                                       f"{array[np.mod(array, 1) != 0].flat[0]}")
        model = self._model()
        with raising(TrainError, _FIT_FLAGS):
            result = model.fit(_to_numpy(x, "x"), labels, int(epochs), int(batch_size),
                               optimizer, float(lr), float(momentum),
                               -1.0 if weight_decay is None else float(weight_decay), int(seed),
                               val_x, val_y, checkpoint or "", resume or "", bool(verbose))
        history = History(epochs=list(result["epochs"]), steps=result["steps"],
                          seconds=result["seconds"])
        for epoch in history.epochs:
            for key in ("loss", "accuracy", "val_accuracy"):
                if key in epoch:
                    history.history.setdefault(key, []).append(epoch[key])
        return history

    def train_step(self, x: ArrayLike, y: ArrayLike) -> float:
        """One optimizer step on a batch; the model must be compiled with train_batch_size."""
        with raising(TrainError):
            return self._model().train_step(_to_numpy(x, "x"), _to_numpy(y, "y"))

    # --- inspecting and saving -------------------------------------------------------------
    def inspect(self) -> Dict[str, Any]:
        """The compile report as Python data, as ``kiln inspect --format=json`` prints it: kernels
        (fused nodes, launch, FLOPs, bytes, modeled time, ptxas figures), totals and the memory
        plan (docs/inspect.md)."""
        return json.loads(self._model().report_json())

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the model as a package (``kiln run`` and ``kiln.load`` read it), with the
        parameters as they are now."""
        with raising(LoadError):
            self._model().save(os.fspath(path))

    def parameters(self) -> Dict[str, np.ndarray]:
        """The parameters as they are now (trained ones after fit), by name."""
        return self._model().parameters()

    def set_parameters(self, values: Mapping[str, ArrayLike]) -> None:
        """Replaces parameters by name (the same shapes; an error changes nothing)."""
        with raising(InputError):
            self._model().set_parameters({k: _to_numpy(v, f"parameter '{k}'") for k, v in values.items()})


def load(path: Union[str, os.PathLike], **options: Any) -> Model:
    """Loads a model file or a package; compiles it on first use (or with ``.compile()``).

    Options: ``input_shapes`` ({input: shape}, for an imported model's symbolic dims),
    ``dynamic_dims`` ({dim name: bound}), ``opt_level`` (0: no passes), ``cache`` (the on-disk
    kernel cache), and the defaults of ``compile``: ``backend``, ``precision``, ``arch``,
    ``train_batch_size``.
    """
    return Model(path, **options)


def load_dataset(name: str = "mnist", split: str = "train",
                 first: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """A built-in dataset ("mnist", "fashion-mnist") as ``kiln train`` reads it: images f32
    [N, 1, 28, 28] in [0, 1] and labels i32 [N]; ``first`` > 0 keeps the first samples."""
    with raising(LoadError):
        return _kiln.load_dataset(name, split, int(first))


def cache_info() -> CacheInfo:
    """The on-disk kernel and package cache."""
    with raising(LoadError):
        return CacheInfo(**_kiln.cache_info())
