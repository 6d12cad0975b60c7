"""The answer as the worker writes it (server/dispatch/answer.py): the document json.dumps
writes, gathered into few writes, within its budget; and the spec's plain form for the pipe."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from server.dispatch.answer import AnswerSpec, Budget, BufferSink, OutputSpec, encode
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
