"""An upload's `dims` form field (`graphgate upload --dim`): the most each unknown input dim takes,
against a real `graphgate serve`. The budgets are computed at the declared bounds, the version
keeps them (after a restart too) and every request is checked against them; a declaration that
is not NAME=SIZE is 400 INVALID_DIMS, one the program has no use for 422 DIM_DECLARATION_REFUSED."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx2
import numpy as np
import pytest
from typer.testing import CliRunner

from server.cli.main import app as cli
from tests.support.api import assert_error, auth, post_tenant
from tests.support.backends import backend_environment
from tests.support.builders import FP32, Built, GraphBuilder, V, weights
from tests.support.served import Server
from validator import DEFAULT_POLICY

FEATURES: Final = 4


def _frames() -> Built:
    """y = x * scale over x[B, D1, 4]: D1 (frames) is no batch, its bound the upload's to say."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, -1, FEATURES])
    scale = g.param("scale", weights(FEATURES))
    g.node("elementwise_mul", {"X": [x], "Y": [scale]}, {"Out": [V("y", [-1, -1, FEATURES])]})
    g.fetch("y")
    return g.built()


FRAMES: Final = _frames()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, backend: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Server, str]]:
    env = backend_environment(backend, request)
    with Server(tmp_path_factory.mktemp("dims") / "data", env) as server:
        yield server, post_tenant(server, "acme")


def _post(served: tuple[Server, str], path: str, fields: dict[str, str]) -> httpx2.Response:
    server, key = served
    files = {"program": FRAMES.program, "params": FRAMES.params or b""}
    return httpx2.post(
        f"{server.url}{path}", data=fields, files=files, headers=auth(key), timeout=120
    )


def _infer(served: tuple[Server, str], name: str, frames: int) -> httpx2.Response:
    server, key = served
    x = np.ones((1, frames, FEATURES), np.float32)
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.ravel().tolist()}]}  # fmt: skip
    return httpx2.post(
        f"{server.url}/v2/models/{name}/infer", json=body, headers=auth(key), timeout=60
    )


def test_declared_dims_bound_the_budgets_are_kept_and_checked(
    served: tuple[Server, str],
) -> None:
    plain = _post(served, "/v1/models", {"name": "plain"})
    bounded = _post(served, "/v1/models", {"name": "frames", "dims": "D1=16"})
    assert plain.status_code == 201, plain.text
    assert bounded.status_code == 201, bounded.text
    report, plain_report = bounded.json()["report"], plain.json()["report"]
    max_batch, max_dynamic = DEFAULT_POLICY.max_batch, DEFAULT_POLICY.max_dynamic_dim
    assert report["dim_bounds"] == {"B": max_batch, "D1": 16}
    assert plain_report["dim_bounds"] == {"B": max_batch, "D1": max_dynamic}
    assert {"input": "x", "dim": 1, "kind": "at_most", "value": 16,
            "reason": "D1 declared at upload"} in report["dim_constraints"]  # fmt: skip
    # Every budget at D1 = 16: y is [B, 16, 4] floats, not [B, 512, 4].
    assert report["cost"]["largest_tensor_bytes"] == max_batch * 16 * FEATURES * 4
    assert plain_report["cost"]["largest_tensor_bytes"] == max_batch * max_dynamic * FEATURES * 4

    server, key = served
    listed = httpx2.get(f"{server.url}/v1/models/frames", headers=auth(key), timeout=30).json()
    assert listed["versions"][0]["dims"] == {"D1": 16}
    assert listed["versions"][0]["report"]["dim_bounds"] == {"B": max_batch, "D1": 16}

    assert _infer(served, "frames", 16).status_code == 200
    assert_error(_infer(served, "frames", 17), 400, "INPUT_SHAPE")
    assert _infer(served, "plain", 17).status_code == 200


def test_the_declaration_survives_a_restart(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """A restarted server compiles the stored version again, at its stored bounds."""
    env = backend_environment(backend, request)
    data = tmp_path / "data"
    with Server(data, env) as server:
        key = post_tenant(server, "acme")
        uploaded = _post((server, key), "/v1/models", {"name": "frames", "dims": "x.1=8"})
        assert uploaded.status_code == 201, uploaded.text
    with Server(data, env) as again:
        refused = _infer((again, key), "frames", 9)
        assert_error(refused, 400, "INPUT_SHAPE")
        assert "at most 8" in refused.json()["error"]
        assert _infer((again, key), "frames", 8).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models", "/v1/check"])
@pytest.mark.parametrize(
    ("dims", "expected"),
    [
        ("D1:16", "expected NAME=SIZE[,NAME=SIZE...] (SIZE a whole number), got 'D1:16'"),
        ("D1=-3", "got 'D1=-3'"),
        ("D1=16,D1=8", "expected each NAME once, got 'D1' twice"),
        ("D1=1" + "0" * 30, "(SIZE a whole number)"),
    ],
)
def test_bad_syntax_is_400_invalid_dims(
    served: tuple[Server, str], path: str, dims: str, expected: str
) -> None:
    refused = _post(served, path, {"name": "m", "dims": dims})
    assert_error(refused, 400, "INVALID_DIMS")
    assert expected in refused.json()["error"]


@pytest.mark.parametrize("path", ["/v1/models", "/v1/check"])
@pytest.mark.parametrize(
    ("dims", "expected"),
    [
        ("T=512", "expected one of ['D1'] or FEED.AXIS for an unknown dim, got 'T'"),
        ("x.2=8", "expected one of ['D1'] or FEED.AXIS for an unknown dim, got 'x.2'"),
        ("B=8", "expected a dim other than the batch, got the batch"),
        ("D1=0", "expected a size in 1..2147483647, got 0"),
        ("D1=2147483648", "expected a size in 1..2147483647, got 2147483648"),
    ],
)
def test_a_declaration_the_program_refuses_is_422(
    served: tuple[Server, str], path: str, dims: str, expected: str
) -> None:
    refused = _post(served, path, {"name": "m", "dims": dims})
    assert_error(refused, 422, "DIM_DECLARATION_REFUSED")
    body = refused.json()
    assert expected in body["error"]
    assert [d["code"] for d in body["diagnostics"]] == ["DIM_DECLARATION"]


def test_graphgate_upload_dim_sends_the_declarations(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    server, key = served
    program, params = tmp_path / "frames.pdmodel", tmp_path / "frames.pdiparams"
    program.write_bytes(FRAMES.program)
    params.write_bytes(FRAMES.params or b"")

    def upload(*dims: str) -> Any:
        options = [arg for d in dims for arg in ("--dim", d)]
        command = ["upload", "cli", str(program), "--params", str(params), *options, "--json"]
        return CliRunner().invoke(cli, [*command, "--url", server.url, "--key", key])

    done = upload("D1=24")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["report"]["dim_bounds"]["D1"] == 24
    refused = upload("D9=24")
    assert refused.exit_code == 1, refused.output
    assert "expected one of ['D1']" in refused.output
    assert "[DIM_DECLARATION_REFUSED]" in refused.output
    malformed = upload("D1")
    assert malformed.exit_code == 2, malformed.output
    assert "INVALID_DIMS" in malformed.output
