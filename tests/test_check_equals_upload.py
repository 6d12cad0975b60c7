"""`graphgate check`, `POST /v1/check` and upload give the same answer for every bad input:
every declared invalid op case (as a one-op program) and every bad-input table row run through
all three, which must report identical diagnostic codes, and the upload stores nothing."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from typer.testing import CliRunner

from executor.lower import BOUNDARY_OPS
from server.cli.main import EXIT_REJECTED, EXIT_VALID, app
from server.main import create_app
from server.settings import Settings
from tests.ops.cases import dtype_of
from tests.support.api import ADMIN_TOKEN, auth, new_tenant
from tests.support.bad_inputs import ROWS, Row
from tests.support.builders import GraphBuilder, V
from validator.ops import REGISTRY, Case, OpDef

_NAMES = itertools.count()


def one_op_program(op: OpDef, case: Case) -> tuple[bytes, bytes | None]:
    """The case's op alone: each input a parameter holding the case's array (so that small
    integer inputs keep their values, as in the rule test), each used output fetched."""
    g = GraphBuilder()
    inputs: dict[str, list[str]] = {}
    for slot in op.inputs:
        value = case.inputs.get(slot.slot)
        if value is None:
            continue
        arrays = value if isinstance(value, tuple) else (value,)
        names = [f"{slot.slot}_{i}" for i in range(len(arrays))]
        for name, array in zip(names, arrays, strict=True):
            g.param(name, np.ascontiguousarray(array), dtype_of(array))
        inputs[slot.slot] = names
    outputs = {o.slot: [V(f"out_{o.slot}")] for o in op.used_outputs}
    g.node(op.op_type, inputs, outputs, dict(case.attrs))
    for o in op.used_outputs:
        g.fetch(f"out_{o.slot}")
    return g.program_bytes(), g.params_bytes()


# Control-flow ops need sub-blocks around them; their refusals are rows of the bad-input table.
OP_CASES = [
    pytest.param(op, case, id=f"{op.op_type}-{i}")
    for op in REGISTRY
    if op.op_type not in BOUNDARY_OPS
    for i, case in enumerate(op.cases)
    if case.raises is not None
]
# The CLI checks against the default policy, like the app here: rows with a policy of their own
# are left out (their codes come from the validator alone, tested in tests/validator/).
BAD_INPUTS = [pytest.param(r, id=r.id) for r in ROWS if r.gap is None and r.make()[2] is None]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data = tmp_path_factory.mktemp("data")
    settings = Settings(data_dir=data, admin_token=SecretStr(ADMIN_TOKEN))
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture(scope="module")
def key(client: TestClient) -> str:
    return new_tenant(client, "three-way")


def cli_codes(
    program: bytes, params: bytes | None, folder: Path, program_file: str = "model.pdmodel"
) -> list[str] | None:
    """`graphgate check --json`'s diagnostic codes; None when it accepts the program."""
    folder.mkdir()
    path = folder / program_file
    path.write_bytes(program)
    if params is not None:
        (folder / "model.pdiparams").write_bytes(params)
    result = CliRunner().invoke(app, ["check", str(path), "--json"])
    body = json.loads(result.stdout)
    if result.exit_code == EXIT_VALID and body["valid"]:
        return None
    assert result.exit_code == EXIT_REJECTED, result.output
    return [d["code"] for d in body["diagnostics"]]


def http_codes(response: Any, accepted: int) -> list[str] | None:
    """The rejection's diagnostic codes; None when the route accepts the program."""
    if response.status_code == accepted:
        return None
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "VALIDATION_FAILED"
    return [d["code"] for d in body["diagnostics"]]


def assert_same_answer(
    client: TestClient,
    key: str,
    program: bytes,
    params: bytes | None,
    folder: Path,
    program_file: str = "model.pdmodel",
) -> None:
    """The three give the same codes (or all accept); a rejected upload stores nothing."""
    # Not tests/support/uploads.py's upload_files: a bad input's params may be empty bytes, which
    # must reach the server as an empty part (upload_files leaves out params that are falsy).
    files = {"program": program, **({"params": params} if params is not None else {})}
    name = f"m{next(_NAMES)}"
    checked = http_codes(client.post("/v1/check", files=files, headers=auth(key)), 200)
    uploaded = http_codes(
        client.post("/v1/models", data={"name": name}, files=files, headers=auth(key)), 201
    )
    assert (cli_codes(program, params, folder, program_file), checked) == (uploaded, uploaded)
    stored = client.get(f"/v1/models/{name}", headers=auth(key)).status_code
    assert stored == (200 if uploaded is None else 404)


@pytest.mark.parametrize(("op", "case"), OP_CASES)
def test_invalid_op_case_gets_one_answer(
    client: TestClient, key: str, tmp_path: Path, op: OpDef, case: Case
) -> None:
    program, params = one_op_program(op, case)
    assert_same_answer(client, key, program, params, tmp_path / "cli")


@pytest.mark.parametrize("row", BAD_INPUTS)
def test_bad_input_gets_one_answer(client: TestClient, key: str, tmp_path: Path, row: Row) -> None:
    program, params, _ = row.make()
    assert_same_answer(client, key, program, params, tmp_path / "cli")


def test_the_cases_cover_every_family_and_most_rows() -> None:
    families = {op.op_type for op, _ in (p.values for p in OP_CASES)}  # type: ignore[misc]
    assert len(OP_CASES) > 300 and len(families) > 80
    assert len(BAD_INPUTS) > 150


# PIR programs (Paddle 3's model.json): the same three answers, the CLI reading `model.json`.
_PIR_DATA = Path(__file__).parent / "graph_proto" / "data"
_PIR = (_PIR_DATA / "pir_cnn.json").read_bytes()
_PIR_PARAMS = (_PIR_DATA / "pir_cnn.pdiparams").read_bytes()
PIR_ROWS = [
    pytest.param(_PIR, _PIR_PARAMS, id="pir-valid"),
    pytest.param((_PIR_DATA / "pir_control_flow.json").read_bytes(), None, id="pir-if-while"),
    pytest.param(_PIR, None, id="pir-params-missing"),
    pytest.param(_PIR[: len(_PIR) // 2], _PIR_PARAMS, id="pir-truncated"),
    pytest.param(b"{" + b"[" * 10_000, None, id="pir-nesting-bomb"),
    pytest.param(_PIR.replace(b'"#":"1.relu"', b'"#":"7.relu"'), _PIR_PARAMS, id="pir-dialect"),
    pytest.param(_PIR.replace(b'"#":"1.relu"', b'"#":"1.py_func"'), _PIR_PARAMS, id="pir-op"),
    pytest.param(
        _PIR.replace(b'"I":[{"%":14}]', b'"I":[{"%":999}]'), _PIR_PARAMS, id="pir-undefined"
    ),
]


@pytest.mark.parametrize(("program", "params"), PIR_ROWS)
def test_pir_program_gets_one_answer(
    client: TestClient, key: str, tmp_path: Path, program: bytes, params: bytes | None
) -> None:
    assert_same_answer(client, key, program, params, tmp_path / "cli", "model.json")
