"""Settings reach the validator's Policy and the onnxruntime sessions, from GRAPHGATE_* variables
through create_app to the answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from server.main import create_app
from server.settings import Settings
from tests.support.api import assert_error, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.uploads import post_upload, upload
from validator import DEFAULT_POLICY


def test_policy_and_session_options_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRAPHGATE_MAX_BATCH", "4")
    monkeypatch.setenv("GRAPHGATE_MAX_FLOPS_PER_SAMPLE", "1000")
    monkeypatch.setenv("GRAPHGATE_MAX_LOOP_TRIPS", "null")
    monkeypatch.setenv("GRAPHGATE_ORT_INTRA_OP_THREADS", "2")
    monkeypatch.setenv("GRAPHGATE_ORT_INTER_OP_THREADS", "3")
    monkeypatch.setenv("GRAPHGATE_USE_CUDA", "false")
    monkeypatch.setenv("GRAPHGATE_ORT_ALLOW_SPINNING", "false")
    monkeypatch.setenv("GRAPHGATE_ORT_SPIN_US", "50")
    settings = Settings()
    policy = settings.policy()
    assert (policy.max_batch, policy.max_flops_per_sample, policy.max_loop_trips) == (4, 1000, None)
    assert policy.max_ops == DEFAULT_POLICY.max_ops  # the others keep the Policy's defaults
    options = settings.session_options()
    assert (options.intra_op_threads, options.inter_op_threads, options.use_cuda) == (2, 3, False)
    assert (options.allow_spinning, options.spin_us) == (False, 50)


def test_the_defaults_are_the_policys_own() -> None:
    assert Settings().policy() == DEFAULT_POLICY


def test_a_loop_bound_over_the_ceiling_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHGATE_MAX_LOOP_TRIPS", "5000")
    with pytest.raises(ValidationError, match="max_loop_trips"):
        Settings()


def test_the_app_validates_and_runs_with_the_settings(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    settings = make_settings(data_dir=tmp_path, max_ops=1, use_cuda=False)
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "acme")
        rejected = post_upload(client, key)
        assert_error(rejected, 422, "VALIDATION_FAILED")
        assert "TOO_MANY_OPS" in [d["code"] for d in rejected.json()["diagnostics"]]

    small_feeds = make_settings(data_dir=tmp_path / "other", max_request_bytes=16, use_cuda=False)
    with TestClient(create_app(small_feeds)) as client:
        key = new_tenant(client, "acme")
        upload(client, key)
        x = np.zeros((2, 4), np.float32)  # 32 bytes of feeds
        request = {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": x.tolist()}]
        }
        answer = client.post("/v2/models/m/infer", json=request, headers=auth(key))
        assert_error(answer, 413, "INPUT_TOO_LARGE")
        assert answer.json()["error"] == "expected at most 16 input bytes, got 32"
