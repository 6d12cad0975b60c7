"""V2 inference use cases: model metadata, and one inference request from its body to its
encoded answer (no FastAPI).

The path of one request (`answer`), one owner per step:
- decode: here, on the event loop when the body is small and plain, else in a thread
  (server/v2/codec.py checks it against the signature);
- deadline and answer budget: here (`deadline`, `answer_spec`: the tenant's
  `max_response_bytes`/`max_json_response_bytes`);
- dispatch: here, and only here: the model's batcher when it batches (server/dispatch/
  batching.py), else one worker run waited for in a thread (server/dispatch/pool.py);
- run, budget checks against the re-inferred shapes, and encoding (JSON or binary): the
  worker (server/dispatch/worker.py, answer.py), into its arena; the answer comes back as
  bytes, or as a file of its own for big ones, read piece by piece while it is sent;
- the deadline covers it all: at the deadline the request is answered 504 and its run (or its
  encoding, or its place in a queue) is cancelled; an answer that arrives later is dropped.
"""

from __future__ import annotations

import asyncio
import ctypes
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Final, TypeVar

from executor.errors import DeadlineExceeded
from graph_proto.types import DType
from server.dispatch import Cancel, batching
from server.dispatch.answer import Answer, AnswerSpec, Budget, OutputSpec
from server.dispatch.batching import Batchers
from server.dispatch.pool import Ran, without_frames
from server.errors import BadRequest
from server.services.policies import Quota
from server.services.types import LoadedModel, ModelMetadata
from server.v2 import codec
from server.v2.codec import InferRequest

T = TypeVar("T")
PLATFORM: Final = "onnxruntime_onnx"
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024  # Triton's --http-max-input-size default
# Bodies at most this big, uncompressed, decode in microseconds: cheaper than a thread hop.
# Bigger ones (a JSON tensor of 150k floats takes ~13 ms) and compressed ones (which may
# inflate up to the body cap) are decoded off the event loop.
INLINE_MAX_BODY_BYTES: Final = 16 * 1024
TIMEOUT_HEADER: Final = "graphgate-timeout-ms"
# Requests at least this big give their memory back to the system once over (`_memory_back`).
BIG_BODY_BYTES: Final = 16 * 1024 * 1024
NO_BUDGET: Final = Budget()  # no limit
# A request's body: its bytes, or the pieces it was read in (`answer` joins them).
Body = bytes | list[bytes]


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What the app lends every inference: its threads, its batchers, the server's caps."""

    threads: Executor
    batchers: Callable[[], Batchers | None] = lambda: None  # the app's (tests swap them)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    timeout_s: float = 30.0
    budget_of: Callable[[str], Budget] = lambda _tenant_id: NO_BUDGET  # the tenant's answers


@dataclass(frozen=True, slots=True)
class Reply:
    """An inference's answer, its headers, and its deadline (which the sending must also
    keep); `close()` once it is sent or dropped."""

    answer: Answer
    headers: dict[str, str]
    deadline: float
    after: Callable[[], None] | None = None  # see `_memory_back`

    def close(self) -> None:
        self.answer.close()
        if self.after is not None:
            self.after()


def metadata(model: LoadedModel) -> ModelMetadata:
    """V2 model metadata: the signature of the resolved version."""
    program = model.compiled.program
    return ModelMetadata(model.name, model.version, PLATFORM, program.inputs, program.outputs)


async def answer(
    model: LoadedModel,
    body: Body,
    headers: Mapping[str, str],
    *,
    dispatch: Dispatch,
    cancel: Cancel,
    source: str = "",
) -> Reply:
    """One V2 inference (JSON or binary), from the request's body to its encoded answer: the
    module's docstring says the steps. `body`: its bytes, or the pieces it came in, joined
    where they are decoded. `headers` are the request's (lower-case names); `source` is whose
    queue it waits in when batched (fairness: the caller's key)."""
    loop = asyncio.get_running_loop()
    after = _memory_back(dispatch.threads) if body_size(body) >= BIG_BODY_BYTES else None
    cap = dispatch.max_body_bytes
    try:
        if decodes_cheaply(body, headers):
            decoded = decode(model, _joined(body), headers, max_body_bytes=cap)
        else:
            # NOTE: joined in the decode's thread, never on the event loop: a 62 MB body's join
            # (the copy and the faults of its fresh pages) held the loop ~45 ms, every other
            # tenant's request waiting behind it; `bytes.join` lets go of the GIL while it
            # copies more than 1 MiB. And one thread hop for both, not one each (a 3 MB JSON
            # tensor's request took three: join, decode, run).
            decoded = await _in_thread(
                loop,
                dispatch.threads,
                lambda: decode(model, _joined(body), headers, max_body_bytes=cap),
            )
        return await _answer(model, decoded, headers, dispatch, cancel, source, loop, after)
    except BaseException:
        if after is not None:
            after()
        raise


async def answer_decoded(
    model: LoadedModel,
    decoded: InferRequest,
    headers: Mapping[str, str],
    *,
    size: int,
    dispatch: Dispatch,
    cancel: Cancel,
    source: str = "",
) -> Reply:
    """`answer` for a request decoded elsewhere (gRPC: server/grpc/translate.py reads the
    message into the codec's checks directly, without a V2 body to write and parse); `size`
    is the request's size in bytes (a big one gives its memory back once over)."""
    loop = asyncio.get_running_loop()
    after = _memory_back(dispatch.threads) if size >= BIG_BODY_BYTES else None
    try:
        return await _answer(model, decoded, headers, dispatch, cancel, source, loop, after)
    except BaseException:
        if after is not None:
            after()
        raise


async def _answer(
    model: LoadedModel,
    decoded: InferRequest,
    headers: Mapping[str, str],
    dispatch: Dispatch,
    cancel: Cancel,
    source: str,
    loop: asyncio.AbstractEventLoop,
    after: Callable[[], None] | None,
) -> Reply:
    due = deadline(decoded, headers, dispatch.timeout_s)
    spec = answer_spec(model, decoded, dispatch.budget_of(model.tenant_id))
    batchers = dispatch.batchers()
    batcher = None
    # A request whose feeds disagree on their batch dim is not rows of a batch: it runs alone.
    if batchers is not None and batching.shared_rows(decoded.feeds) is not None:
        batcher = batchers.for_model(model.compiled, model.label, model.batching)
    ran = None if batcher is None else batcher.alone_is_better(_rows(decoded))
    if batcher is not None and ran is None:
        waiter = batcher.submit_answer(
            decoded.feeds, spec, source=source, deadline=due, cancel=cancel, loop=loop
        )
    else:
        waiter = _in_thread(
            loop,
            dispatch.threads,
            lambda: _run_alone(model, decoded, spec, due, cancel, ran),
            after,
        )
    try:
        encoded = await batching.wait_async(waiter, due)
    except BaseException as error:
        if isinstance(error, DeadlineExceeded):
            cancel.set()  # the run, its encoding or its place in the batch queue stops now
        # NOTE: the waiter holds this error, and the error its traceback's frames (the body,
        # the feeds), and those frames the waiter: a cycle only the garbage collector frees,
        # whenever it runs (a 62 MB request left 130 MB behind, request after request).
        del waiter
        raise error.with_traceback(None) from None
    return Reply(encoded, response_headers(encoded), due, after)


def infer(
    model: LoadedModel,
    body: bytes,
    headers: Mapping[str, str],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    timeout_s: float = 30.0,
    budget: Budget = NO_BUDGET,
) -> tuple[bytes, dict[str, str]]:
    """`answer` without an event loop, unbatched, the whole body at once (tests, benchmarks,
    tools): the response body and its headers."""
    decoded = decode(model, body, headers, max_body_bytes=max_body_bytes)
    lower = {k.lower(): v for k, v in headers.items()}
    spec = answer_spec(model, decoded, budget)
    encoded = _run_alone(model, decoded, spec, deadline(decoded, lower, timeout_s), Cancel())
    try:
        return encoded.body(), response_headers(encoded)
    finally:
        encoded.close()


def decode(
    model: LoadedModel,
    body: bytes,
    headers: Mapping[str, str],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> InferRequest:
    """Decodes and checks a V2 request (JSON or binary) against the model's signature."""
    lower = {name.lower(): value for name, value in headers.items()}
    body = codec.decompress(body, lower.get("content-encoding"), max_body_bytes)
    program = model.compiled.program
    return codec.decode_request(
        body, lower.get(codec.HEADER_LENGTH), program.inputs, program.outputs
    )


def deadline(request: InferRequest, headers: Mapping[str, str], timeout_s: float) -> float:
    """When the request must be answered (time.monotonic()): `timeout_s` from now, or sooner
    when the client asks (V2 parameter `timeout` in microseconds, or Graphgate-Timeout-Ms)."""
    seconds = timeout_s
    if request.timeout_us is not None:
        seconds = min(seconds, request.timeout_us / 1e6)
    raw = next((v for k, v in headers.items() if k.lower() == TIMEOUT_HEADER), None)
    if raw is not None:
        if not raw.isascii() or not raw.isdigit() or len(raw) > 12 or int(raw) == 0:
            raise BadRequest(
                f"Graphgate-Timeout-Ms: expected a positive integer (milliseconds), got "
                f"{raw[:40]!r}"
            )
        seconds = min(seconds, int(raw) / 1e3)
    return time.monotonic() + seconds


def budget_of(quota: Quota) -> Budget:
    """A tenant's answer budget, from its quota (server/services/policies.py)."""
    return Budget(quota.max_response_bytes, quota.max_json_response_bytes)


def answer_spec(model: LoadedModel, request: InferRequest, budget: Budget) -> AnswerSpec:
    """What the worker needs to encode this request's answer, within `budget`."""
    outputs = tuple(
        OutputSpec(
            out.spec.name,
            codec.DATATYPES[out.spec.dtype],
            out.spec.dtype.numpy.str,
            out.binary,
            bf16=out.spec.dtype == DType.BF16,
        )
        for out in request.outputs
    )
    return AnswerSpec(model.name, str(model.version), request.id, outputs, budget)


def response_headers(answer: Answer) -> dict[str, str]:
    """Content-Type, and the JSON header's length when binary outputs follow it."""
    if answer.header_length is None:
        return {"content-type": codec.JSON_CONTENT}
    return {
        "content-type": codec.BINARY_CONTENT,
        codec.HEADER_LENGTH: str(answer.header_length),
    }


def _run_alone(
    model: LoadedModel,
    request: InferRequest,
    spec: AnswerSpec,
    due: float,
    cancel: Cancel,
    ran: Ran | None = None,
) -> Answer:
    """One unbatched run in a worker, which encodes the answer (`ran`: told its seconds)."""
    rows = _rows(request)
    [encoded] = model.compiled.answer(
        request.feeds, [spec], [rows], deadline=due, cancelled=cancel, label=model.label, ran=ran
    )
    if isinstance(encoded, Exception):
        raise encoded
    return encoded


def _rows(request: InferRequest) -> int:
    """The batch dim of the first feed (0 for a scalar feed): what the answer budget of a
    batch member is shared by."""
    first = next(iter(request.feeds.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 0


def _in_thread(
    loop: asyncio.AbstractEventLoop,
    threads: Executor,
    work: Callable[[], T],
    late: Callable[[], None] | None = None,
) -> asyncio.Future[T]:
    """`work()` in the app's inference threads, its outcome handed to the loop in one
    call_soon_threadsafe; an Answer that comes back after its waiter gave up (the deadline)
    is closed there, and `late` called (the request is over only then).

    NOTE: not Starlette's `run_in_threadpool`: anyio's hand-off costs the event loop ~50-90 us
    of CPU a call here, an executor's ~15 us (benchmarks/results/serving.md); and not
    `run_in_executor`, whose future cannot be failed at the deadline while its thread runs on."""
    waiter: asyncio.Future[T] = loop.create_future()
    held = [work]  # dropped once run: what it holds (the feeds) is freed with it

    def run() -> None:
        try:
            outcome: tuple[bool, object] = (True, held.pop()())
        except BaseException as error:  # handed to the waiter, raised there without its frames
            outcome = (False, without_frames(error))
        try:
            loop.call_soon_threadsafe(_settle, waiter, *outcome, late)
        except RuntimeError:  # the loop closed: nobody waits any more
            _drop(outcome[1])

    threads.submit(run)
    return waiter


def _settle(
    waiter: asyncio.Future[T], ok: bool, value: object, late: Callable[[], None] | None
) -> None:
    if waiter.done():
        _drop(value)
        if late is not None:
            late()
    elif ok:
        waiter.set_result(value)  # type: ignore[arg-type]
    else:
        assert isinstance(value, BaseException)
        waiter.set_exception(value)


def _drop(value: object) -> None:
    if isinstance(value, Answer):
        value.close()


def _memory_back(threads: Executor) -> Callable[[], None]:
    """What gives a big request's memory back to the system once it is over: its body came
    in thousands of pieces, and the C allocator keeps the pages they were freed from (RSS
    grew by twice a 62 MB body and stayed). malloc_trim returns them; in a thread, ~ms."""

    def later() -> None:
        threads.submit(_trim)

    return later


def _trim() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to trim this way
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC: Final = _libc()


def body_size(body: Body) -> int:
    return len(body) if isinstance(body, bytes) else sum(map(len, body))


def _joined(body: Body) -> bytes:
    return body if isinstance(body, bytes) else b"".join(body)


def decodes_cheaply(body: Body, headers: Mapping[str, str]) -> bool:
    """Whether decoding `body` is cheap enough for the event loop: small and not compressed."""
    if body_size(body) > INLINE_MAX_BODY_BYTES:
        return False
    encoding = next((v for k, v in headers.items() if k.lower() == "content-encoding"), None)
    return (encoding or "identity").strip().lower() == "identity"
