"""kiln's exceptions: one base class, ``kiln.Error``, and a subclass per kind of call."""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Type

from . import _kiln


class Error(Exception):
    """A failure kiln reports: a bad model, package, input, dataset or option.

    ``str(error)`` is the line the ``kiln`` tool prints, location first
    (``model.onnx: node 17 'Conv_3' (Conv, opset 13): error: ...``); ``location``,
    ``message`` and ``notes`` hold its parts.
    """

    def __init__(self, location: str, message: str, notes: List[str] | None = None,
                 text: str | None = None) -> None:
        self.location = location
        self.message = message
        self.notes = list(notes or [])
        self.text = text or (f"{location}: error: {message}" if location else f"error: {message}")
        super().__init__(self.text)

    def __str__(self) -> str:
        return self.text


class LoadError(Error):
    """Loading or compiling a model or package failed (kiln.load, Model.compile, Model.save)."""


class InputError(Error, ValueError):
    """An input given to a model is wrong: an unknown name, a missing one, another dtype or shape."""


class TrainError(Error):
    """Training failed: bad data or labels, an option the model cannot take, a loss gone NaN."""


@contextlib.contextmanager
def raising(kind: Type[Error], locations: Dict[str, str] | None = None) -> Iterator[None]:
    """Turns the extension's KilnError into ``kind``, with the same location and message;
    ``locations`` renames locations (the CLI's flags into the Python arguments they are)."""
    try:
        yield
    except _kiln.KilnError as error:
        location, message, notes, text = error.args
        if locations and location in locations:
            location = locations[location]
            text = None  # rendered again with the new location
        if text is None and notes:
            text = "\n".join([f"{location}: error: {message}"] + [f"note: {n}" for n in notes])
        raise kind(location, message, notes, text) from None
