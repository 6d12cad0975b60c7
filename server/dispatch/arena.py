"""A shared-memory arena per worker: a file on /dev/shm mapped by the server and its worker.

Tensors are written at 64-byte aligned offsets and described by small layouts (name, dtype,
shape, offset); only the layouts cross the pipe. The arena grows (never shrinks) when a
request's tensors do not fit; both sides remap to the size the last message names.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import numpy as np

_ALIGN: Final = 64
_KEEP_MAPPED: Final = 4 * 1024 * 1024  # see Arena.forget

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

    def forget(self, keep: int = _KEEP_MAPPED) -> None:
        """Drops this process's pages of the arena past its first `keep` bytes (the file keeps
        its bytes): a big request's tensors, written here, would otherwise stay in this
        process's resident memory after it is answered. The first bytes stay mapped: small
        requests reuse them without page faults."""
        start = -(-keep // mmap.PAGESIZE) * mmap.PAGESIZE
        if self.size > start and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED, start, self.size - start)

    def put(self, offset: int, data: bytes | memoryview) -> int:
        """Writes `data` at `offset` (growing the arena as `write` does); the end offset."""
        end = offset + len(data)
        if end > self.size:
            self.ensure(max(end, self.size * 2))
        self._map[offset:end] = data
        return end

    def pread(self, offset: int, count: int) -> bytes:
        """`count` bytes from `offset`, read through the file, not the map: the reader's own
        memory holds only what it asked for (touching the mapped pages would add them all to
        its resident size, if shared)."""
        return os.pread(self._fd, count, offset)

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


class Spill:
    """Bytes copied out of an arena into a file of their own on /dev/shm: the kernel copies
    (copy_file_range), so no process's heap holds them, and the arena's worker is free at once
    while they are sent. Unlinked from the start: closing the file frees them."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)  # a spill never closed: at GC

    @classmethod
    def copy(cls, arena: Arena, offset: int, count: int) -> Spill:
        fd, name = tempfile.mkstemp(prefix="graphgate-answer-", dir=_folder())
        os.unlink(name)
        spill = cls(fd)
        try:
            done = 0
            while done < count:
                moved = _copy_range(arena._fd, fd, count - done, offset + done, done)
                if moved <= 0:
                    raise OSError(f"expected {count} bytes of the arena, got {done}")
                done += moved
        except BaseException:
            spill.close()
            raise
        return spill

    def pread(self, offset: int, count: int) -> bytes:
        return os.pread(self._fd, count, offset)

    def close(self) -> None:
        self._closer()


def _copy_range(src: int, dst: int, count: int, src_offset: int, dst_offset: int) -> int:
    """copy_file_range where the system has it, else one bounded read and write."""
    if hasattr(os, "copy_file_range"):
        try:
            return os.copy_file_range(src, dst, count, src_offset, dst_offset)
        except OSError:
            pass  # an older kernel or another file system: the plain way
    data = os.pread(src, min(count, 1024 * 1024), src_offset)
    return os.pwrite(dst, data, dst_offset)
