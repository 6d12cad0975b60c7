"""The answer as the worker writes it (server/dispatch/answer.py): the document json.dumps
writes, gathered into few writes, within its budget; and the spec's plain form for the pipe."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

from server.dispatch.answer import (
    AnswerSpec,
    Budget,
    BufferSink,
    OutputSpec,
    check_before_run,
    encode,
)
from server.errors import ResponseOverBudget


class CountingSink(BufferSink):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes | memoryview) -> None:
        self.writes += 1
        super().write(data)


SPEC = AnswerSpec(
    'm "1"',
    "3",
    "req-é\n",
    (
        OutputSpec('y "quoted" é', "FP32", "<f4", True),
        OutputSpec("flags", "BOOL", "|b1", False),
    ),
    Budget(),
)


def test_the_answer_is_the_document_json_dumps_writes_then_the_raw_bytes() -> None:
    y = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    flags = np.array([True, False, True])
    sink = CountingSink()
    length, header = encode(SPEC, {'y "quoted" é': y, "flags": flags}, sink, lambda: None)
    doc = {
        "model_name": 'm "1"',
        "model_version": "3",
        "id": "req-é\n",
        "outputs": [
            {
                "name": 'y "quoted" é',
                "datatype": "FP32",
                "shape": [2, 3],
                "parameters": {"binary_data_size": 24},
            },
            {"name": "flags", "datatype": "BOOL", "shape": [3], "data": [True, False, True]},
        ],
    }
    expected_header = json.dumps(doc, separators=(",", ":")).encode()
    assert bytes(sink.buffer) == expected_header + y.tobytes()
    assert (length, header) == (len(expected_header) + 24, len(expected_header))
    assert sink.writes == 2  # the JSON text in one write, then the tensor's bytes


def test_json_text_over_its_budget_is_refused_before_it_is_all_written() -> None:
    spec = AnswerSpec("m", "1", None, (OutputSpec("y", "FP32", "<f4", False),), Budget(0, 4096))
    values = {"y": np.full(200_000, 1.25, np.float32)}
    sink = CountingSink()
    with pytest.raises(ResponseOverBudget, match="at most 4,096 bytes"):
        encode(spec, values, sink, lambda: None)
    assert len(sink.buffer) <= 4096


def test_the_spec_crosses_the_pipe_as_plain_tuples_and_comes_back_equal() -> None:
    wire = SPEC.wire()
    assert b"server" not in pickle.dumps(wire)  # no class of ours to look up on the way
    assert AnswerSpec.from_wire(pickle.loads(pickle.dumps(wire))) == SPEC


BINARY = AnswerSpec(
    'm "1"',
    "3",
    "req-é\n",
    (
        OutputSpec('y "quoted" é', "FP32", "<f4", True),
        OutputSpec("ids", "INT64", "<i8", True),
        OutputSpec("flags", "BOOL", "|b1", True),
    ),
    Budget(),
)


def _binary_document(outputs: dict[str, np.ndarray], spec: AnswerSpec) -> bytes:
    doc: dict[str, object] = {"model_name": spec.model_name, "model_version": spec.model_version}
    if spec.request_id is not None:
        doc["id"] = spec.request_id
    doc["outputs"] = [
        {
            "name": out.name,
            "datatype": out.datatype,
            "shape": list(outputs[out.name].shape),
            "parameters": {"binary_data_size": outputs[out.name].astype(out.dtype).nbytes},
        }
        for out in spec.outputs
    ]
    return json.dumps(doc, separators=(",", ":")).encode()


@pytest.mark.parametrize("rows", [2, 5000], ids=["small", "over-64-KiB"])
def test_an_all_binary_answer_is_the_header_json_dumps_writes_then_each_outputs_bytes(
    rows: int,
) -> None:
    y = (np.arange(rows * 3, dtype=np.float64).reshape(3, rows) / 7).T  # strided, float64
    ids = np.arange(rows, dtype=np.int64) - 3
    flags = np.arange(rows) % 3 == 0
    outputs = {'y "quoted" é': y, "ids": ids, "flags": flags}
    sink, stops = CountingSink(), []
    length, header = encode(BINARY, outputs, sink, lambda: stops.append(1))
    expected_header = _binary_document(outputs, BINARY)
    raw = y.astype(np.float32).tobytes() + ids.tobytes() + flags.tobytes()
    assert bytes(sink.buffer) == expected_header + raw
    assert (length, header) == (len(expected_header) + len(raw), len(expected_header))
    if rows == 2:
        assert sink.writes == 1  # a small answer is one write
    else:
        assert sink.writes == 4 and len(stops) == 3  # the header, then each output's bytes


def test_an_all_binary_answer_without_an_id_has_none() -> None:
    spec = AnswerSpec("m", "1", None, (OutputSpec("y", "FP32", "<f4", True),), Budget())
    outputs = {"y": np.ones((1, 4), np.float32)}
    sink = BufferSink()
    encode(spec, outputs, sink, lambda: None)
    assert bytes(sink.buffer) == _binary_document(outputs, spec) + outputs["y"].tobytes()


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        (Budget(4096, 0), "this answer is more than {total:,} bytes, at most 4,096 bytes; ask "),
        (Budget(0, 64), "this answer is more than {header} bytes as JSON (0 numbers), at most "),
    ],
    ids=["bytes", "header"],
)
def test_an_all_binary_answer_over_its_budget_is_refused_before_anything_is_written(
    budget: Budget, message: str
) -> None:
    spec = AnswerSpec("m", "1", None, (OutputSpec("y", "FP32", "<f4", True),), budget)
    outputs = {"y": np.ones(1024, np.float32)}
    header = len(_binary_document(outputs, spec))
    sink = CountingSink()
    with pytest.raises(ResponseOverBudget) as refused:
        encode(spec, outputs, sink, lambda: None)
    assert str(refused.value).startswith(message.format(total=header + 4096, header=header))
    assert sink.writes == 0


def test_answers_alike_each_carry_their_own_id_shape_and_values() -> None:
    # A batch's members share one spec and shape (their header is made once): each answer is
    # still its own document, and another id or row count is another header.
    outputs = (OutputSpec("y", "FP32", "<f4", True),)
    first, second = (AnswerSpec("m", "1", i, outputs, Budget()) for i in ("a", "b"))
    batch = np.arange(12, dtype=np.float32).reshape(4, 3)
    members = [(first, batch[0:1]), (first, batch[1:2]), (second, batch[2:4]), (first, batch[3:4])]
    for spec, rows in members:
        sink = BufferSink()
        encode(spec, {"y": rows}, sink, lambda: None)
        assert bytes(sink.buffer) == _binary_document({"y": rows}, spec) + rows.tobytes()


def test_a_batch_is_refused_by_its_first_member_over_budget_and_passes_when_none_is() -> None:
    outputs = (OutputSpec("y", "FP32", "<f4", True),)
    roomy = AnswerSpec("m", "1", None, outputs, Budget(1 << 20, 0))
    tight = AnswerSpec("m", "1", "t", outputs, Budget(600, 0))  # 8 rows: 512 bytes + the text
    shapes = {"y": (12, 16)}
    check_before_run([roomy, roomy, roomy], [4, 4, 4], shapes)
    check_before_run([roomy, tight, roomy], [4, 1, 7], shapes)  # its one row fits
    with pytest.raises(ResponseOverBudget, match="at least 768 bytes"):
        check_before_run([roomy, roomy, tight, tight], [1, 1, 8, 2], shapes)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_a_scalar_output_keeps_its_empty_shape(binary: bool) -> None:
    spec = AnswerSpec("m", "1", None, (OutputSpec("s", "FP32", "<f4", binary),), Budget())
    sink = BufferSink()
    length, header = encode(spec, {"s": np.array(2.5, np.float32)}, sink, lambda: None)
    document = json.loads(bytes(sink.buffer)[: header or length])
    assert document["outputs"][0]["shape"] == []
    assert bytes(sink.buffer)[header or length :] == (np.float32(2.5).tobytes() if binary else b"")


def test_a_spec_unpickled_in_another_process_hashes_as_that_process_makes_it() -> None:
    # Its hash is kept (computed once): one carried over from another process's string hashes
    # would make equal specs miss each other in the worker's memo.
    code = (
        "import pickle, sys; from server.dispatch.answer import AnswerSpec, Budget, OutputSpec;"
        "s = AnswerSpec('m', '1', 'id', (OutputSpec('y', 'FP32', '<f4', True),), Budget());"
        "sys.stdout.buffer.write(pickle.dumps(s))"
    )
    made = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, env={"PYTHONHASHSEED": "7"}
    ).stdout
    here = AnswerSpec("m", "1", "id", (OutputSpec("y", "FP32", "<f4", True),), Budget())
    there = pickle.loads(made)
    assert there == here and hash(there) == hash(here)
