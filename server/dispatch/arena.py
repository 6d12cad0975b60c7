"""A shared-memory arena per worker: a file on /dev/shm mapped by the server and its worker.

Tensors are written at 64-byte aligned offsets and described by small layouts (name, dtype,
shape, offset); only the layouts cross the pipe. The arena grows (never shrinks) when a
request's tensors do not fit; both sides remap to the size the last message names.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import numpy as np

_ALIGN: Final = 64

# (name, dtype str, shape, offset); offset -1: `inline` holds the array (object dtypes only).
Layout = tuple[tuple[str, str, tuple[int, ...], int], ...]


def _folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class Arena:
    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self.size = size
        self._map = mmap.mmap(fd, size)

    @classmethod
    def create(cls, size: int) -> tuple[Arena, Path]:
        fd, name = tempfile.mkstemp(prefix="graphgate-arena-", dir=_folder())
        os.ftruncate(fd, size)
        return cls(fd, size), Path(name)

    @classmethod
    def attach(cls, path: Path, size: int) -> Arena:
        return cls(os.open(path, os.O_RDWR), size)

    def close(self) -> None:
        os.close(self._fd)

    def ensure(self, size: int) -> None:
        """Maps at least `size` bytes, growing the file if the other side has not."""
        if size <= self.size:
            return
        if os.fstat(self._fd).st_size < size:
            os.ftruncate(self._fd, size)
        # NOTE: the old map is dropped, not closed: views into it may still be alive.
        self._map = mmap.mmap(self._fd, size)
        self.size = size

    def write(
        self, arrays: Mapping[str, np.ndarray], start: int = 0
    ) -> tuple[Layout, dict[str, np.ndarray], int]:
        """Writes the arrays from `start`; returns their layout, the object-dtype arrays (sent
        inline), and the end offset."""
        layout = []
        inline: dict[str, np.ndarray] = {}
        offset = start
        for name, array in arrays.items():
            if array.dtype.hasobject:
                inline[name] = array
                layout.append((name, array.dtype.str, tuple(array.shape), -1))
                continue
            offset = -(-offset // _ALIGN) * _ALIGN
            end = offset + array.nbytes
            if end > self.size:
                self.ensure(max(end, self.size * 2))
            view = np.ndarray(array.shape, array.dtype, self._map, offset)
            view[...] = array
            layout.append((name, array.dtype.str, tuple(array.shape), offset))
            offset = end
        return tuple(layout), inline, offset

    def read(
        self, layout: Layout, inline: Mapping[str, np.ndarray], *, copy: bool
    ) -> dict[str, np.ndarray]:
        """The arrays a layout describes: views into the arena, or copies of them."""
        out: dict[str, np.ndarray] = {}
        for name, dtype, shape, offset in layout:
            if offset < 0:
                out[name] = inline[name]
                continue
            view = np.ndarray(shape, np.dtype(dtype), self._map, offset)
            out[name] = view.copy() if copy else view
        return out
