"""An upload's multipart form, its file parts streamed into spool files and hashed on the way.

Starlette's parser, with one change: a file part is written to a spool file
(server/storage/spool.py) whose writer hashes each chunk as it arrives, instead of a temporary
file read back whole afterwards. So an upload's bytes are read once (from the socket), hashed
once, and never held whole in the server's memory; its digests come along with the files.
Every refusal of a malformed body stays Starlette's (400, its message).
"""

from __future__ import annotations

import threading
from typing import Any

from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from server.storage.spool import Spool, Spooled, SpoolWriter


class _SpooledPart(UploadFile):
    """A file part whose bytes go to a spool writer, hashed as they arrive. Written in place
    rather than in a thread per chunk: a chunk (at most 64 KiB from the socket) is hashed and
    written in well under a millisecond, where the thread hop cost as much as the work."""

    def __init__(self, writer: SpoolWriter, part: UploadFile) -> None:
        super().__init__(file=part.file, size=0, filename=part.filename, headers=part.headers)
        self.writer = writer
        self.spooled: Spooled | None = None

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        self.size = (self.size or 0) + len(data)

    async def seek(self, _offset: int) -> None:  # the parser's "part complete": done
        self.finish()

    async def close(self) -> None:
        self.discard()

    def finish(self) -> None:
        if self.spooled is None:
            self.spooled = self.writer.finish()

    def discard(self) -> None:
        if self.spooled is None:
            self.writer.abort()
        else:
            self.spooled.discard()


class _Discarding:
    """What Starlette closes when a body turns out malformed: the part's spool file."""

    def __init__(self, part: _SpooledPart) -> None:
        self.part = part

    def close(self) -> None:
        self.part.discard()


class _SpoolingParser(MultiPartParser):
    def __init__(self, request: Request, spool: Spool) -> None:
        super().__init__(request.headers, request.stream())
        self._spool = spool
        self.files: list[_SpooledPart] = []

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        # NOTE: Starlette's own attributes (1.x): the part it just began, and the files it
        # closes when the body turns out malformed.
        part = self._current_part
        if part.file is None:
            return
        part.file.file.close()  # Starlette's in-memory temporary file, still empty
        spooled_part = _SpooledPart(self._spool.writer(), part.file)
        self.files.append(spooled_part)
        self._files_to_close_on_error.append(_Discarding(spooled_part))  # type: ignore[arg-type]
        part.file = spooled_part


class UploadForm:
    """The form's fields and spooled files; `discard` removes the files once (by whichever of
    the route and the upload's thread holds them last: see `take`)."""

    def __init__(self, form: FormData) -> None:
        self.form = form
        self._lock = threading.Lock()
        self._taken = False
        self._discarded = False

    def get(self, name: str) -> Any:
        return self.form.get(name)

    def take(self) -> bool:
        """Claims the files for the upload's thread (which discards them when done); False
        when the route discarded them already (the request was given up before it ran)."""
        with self._lock:
            self._taken = not self._discarded
            return self._taken

    def discard_unless_taken(self) -> None:
        with self._lock:
            if self._taken or self._discarded:
                return
            self._discarded = True
        self.discard()

    def discard(self) -> None:
        for _name, value in self.form.multi_items():
            if isinstance(value, _SpooledPart):
                value.discard()


def spooled(part: UploadFile) -> Spooled:
    """The spool file of a file part of an `UploadForm`."""
    assert isinstance(part, _SpooledPart) and part.spooled is not None
    return part.spooled


async def read_upload_form(request: Request, spool: Spool) -> UploadForm:
    """The request's form, file parts spooled and hashed; a body that is not multipart is read
    as Starlette reads it (no files). A malformed multipart body is Starlette's 400."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        return UploadForm(await request.form())
    parser = _SpoolingParser(request, spool)
    try:
        return UploadForm(await parser.parse())
    except MultiPartException as exc:
        raise HTTPException(status_code=400, detail=exc.message) from None
    finally:
        for part in parser.files:  # a part the body never finished is in no form
            if part.spooled is None:
                part.discard()
