"""The operator's side against a real `graphgate serve`: every admin write refuses a viewer and
leaves exactly one audit row per change, the console's forms alike; forwarded headers, the
login limit, quotas and policy under concurrent uploads, input validation, bounded
diagnostics, names matched whole."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from server.errors import ModelRejected
from tests.support.api import ADMIN_TOKEN, auth
from tests.support.builders import FP32, GraphBuilder, V, affine, mlp
from tests.support.served import Server
from validator import Diagnostic
from validator.diagnostics import Code

ADMIN = auth(ADMIN_TOKEN)
AFFINE = affine().built()


@pytest.fixture
def served(tmp_path: Path, backend_env: dict[str, str]) -> Iterator[Callable[..., Server]]:
    """Starts `graphgate serve` with extra environment; stops every one at the end."""
    started: list[Server] = []

    def start(**env: str) -> Server:
        server = Server(tmp_path / f"data{len(started)}", {**backend_env, **env})
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()


def _call(server: Server, method: str, path: str, key: str, body: Any = None) -> httpx2.Response:
    return httpx2.request(method, f"{server.url}{path}", json=body, headers=auth(key), timeout=120)


def _audit(server: Server, **filters: str) -> list[dict[str, Any]]:
    """Every audit row matching, oldest first (through audit.jsonl, every page)."""
    answer = httpx2.get(
        f"{server.url}/v1/admin/audit.jsonl", params=filters, headers=ADMIN, timeout=60
    )
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in reversed(answer.text.splitlines())]


def _tenant(server: Server, name: str) -> str:
    created = _call(server, "POST", "/v1/admin/tenants", ADMIN_TOKEN, {"name": name})
    assert created.status_code == 201, created.text
    key: str = created.json()["key"]
    return key


def _operator(server: Server, name: str, role: str) -> str:
    made = _call(server, "POST", "/v1/admin/admins", ADMIN_TOKEN, {"name": name, "role": role})
    assert made.status_code == 201, made.text
    key: str = made.json()["key"]
    return key


def _upload(server: Server, key: str, name: str, built: Any = AFFINE) -> httpx2.Response:
    files = {"program": built.program, "params": built.params or b""}
    return httpx2.post(
        f"{server.url}/v1/models", data={"name": name}, files=files, headers=auth(key), timeout=120
    )


def _openapi_writes(server: Server) -> set[tuple[str, str]]:
    doc = _call(server, "GET", "/v1/openapi.json", ADMIN_TOKEN).json()
    return {
        (method.upper(), path)
        for path, methods in doc["paths"].items()
        if path.startswith("/v1/admin")
        for method in methods
        if method in ("post", "put", "delete", "patch")
    }


# -- every admin write: a viewer refused, an admin audited once per change -------------------


def test_every_admin_write_refuses_a_viewer_and_audits_each_change_once(
    served: Callable[..., Server],
) -> None:
    server = served()
    key = _tenant(server, "acme")
    assert _upload(server, key, "m").status_code == 201
    viewer = _operator(server, "vera", "viewer")
    spare = _operator(server, "spare", "viewer")
    spare_key_id = spare.split("_")[1]
    extra_key = _call(server, "POST", "/v1/admin/tenants/acme/keys", ADMIN_TOKEN).json()
    batching = {"max_batch_size": 1024, "max_queue_delay_us": 1000000}
    # (method, route template, concrete path, body, the audit actions one admin call writes)
    cases: list[tuple[str, str, str, Any, list[str]]] = [
        ("POST", "/v1/admin/tenants", "/v1/admin/tenants", {"name": "beta"},
         ["tenant.create", "key.create"]),
        ("POST", "/v1/admin/tenants/{name}/keys", "/v1/admin/tenants/acme/keys", None,
         ["key.create"]),
        ("DELETE", "/v1/admin/keys/{key_id}", f"/v1/admin/keys/{extra_key['key_id']}", None,
         ["key.revoke"]),
        ("POST", "/v1/admin/admins", "/v1/admin/admins", {"name": "otto", "role": "viewer"},
         ["admin.create"]),
        ("DELETE", "/v1/admin/admins/{name}", "/v1/admin/admins/spare", None, ["admin.revoke"]),
        ("PUT", "/v1/admin/tenants/{name}/policy", "/v1/admin/tenants/acme/policy",
         {"max_batch": 64}, ["policy.set"]),
        ("PUT", "/v1/admin/tenants/{name}/quota", "/v1/admin/tenants/acme/quota",
         {"max_models": 10}, ["quota.set"]),
        ("POST", "/v1/admin/tenants/{name}/suspend", "/v1/admin/tenants/acme/suspend", None,
         ["tenant.suspend"]),
        ("POST", "/v1/admin/tenants/{name}/resume", "/v1/admin/tenants/acme/resume", None,
         ["tenant.resume"]),
        ("PUT", "/v1/admin/models/{tenant}/{name}/{version}/batching",
         "/v1/admin/models/acme/m/1/batching", batching, ["batching.set"]),
        ("DELETE", "/v1/admin/models/{tenant}/{name}/{version}/batching",
         "/v1/admin/models/acme/m/1/batching", None, ["batching.reset"]),
    ]  # fmt: skip
    # Release needs a quarantined version: the viewer's refusal is checked below all the same.
    release = "/v1/admin/quarantine/{tenant}/{name}/{version}/release"
    covered = {(method, template) for method, template, *_ in cases} | {("POST", release)}
    assert covered == _openapi_writes(server), "a write route under /v1/admin is not tested"

    for method, _template, path, body, actions in cases:
        before = len(_audit(server))
        refused = _call(server, method, path, viewer, body)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["code"] == "ADMIN_ROLE_REQUIRED"
        denied = _audit(server)[before:]
        assert [(r["actor"], r["action"], r["outcome"]) for r in denied] == [
            ("admin:vera", actions[0], "denied")
        ], path
        done = _call(server, method, path, ADMIN_TOKEN, body)
        assert done.status_code in (200, 201), (path, done.text)
        rows = _audit(server)[before + 1 :]
        assert [(r["actor"], r["action"], r["outcome"]) for r in rows] == [
            ("admin:root", action, "ok") for action in actions
        ], path
    refused = _call(server, "POST", "/v1/admin/quarantine/acme/m/1/release", viewer)
    assert refused.status_code == 403 and refused.json()["code"] == "ADMIN_ROLE_REQUIRED"
    # The viewer's refused batching left the model's batching as the admin left it (reset).
    assert spare_key_id not in {k for a in _call(server, "GET", "/v1/admin/admins",
                                 ADMIN_TOKEN).json()["admins"] if not a["revoked"]
                                 for k in a["key_ids"]}  # fmt: skip


# -- the console's forms -----------------------------------------------------------------------


class Console:
    """A browser-less console session: the login form's CSRF cookie, then the session's."""

    def __init__(self, server: Server, key: str) -> None:
        self.client = httpx2.Client(base_url=server.url, timeout=60)
        form = self.client.get("/admin/login").text
        token = re.search(r'name="csrf" value="([^"]+)"', form)
        assert token is not None
        answer = self.client.post("/admin/login", data={"key": key, "csrf": token.group(1)})
        assert answer.status_code in (200, 303), answer.text
        self.csrf = self._csrf("/admin/tenants")

    def _csrf(self, path: str) -> str:
        page = self.client.get(path).text
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token is not None, page[:500]
        return token.group(1)

    def post(self, path: str, **fields: str) -> httpx2.Response:
        return self.client.post(path, data={"csrf": self.csrf, **fields})


def test_every_console_form_refuses_a_viewer_and_audits_each_change_once(
    served: Callable[..., Server],
) -> None:
    server = served()
    key = _tenant(server, "acme")
    assert _upload(server, key, "m").status_code == 201
    assert _upload(server, key, "m").status_code == 201
    viewer = Console(server, _operator(server, "vera", "viewer"))
    admin = Console(server, _operator(server, "alice", "admin"))
    extra = _call(server, "POST", "/v1/admin/tenants/acme/keys", ADMIN_TOKEN).json()["key_id"]
    forms: list[tuple[str, dict[str, str], list[str]]] = [
        ("/admin/tenants", {"name": "beta"}, ["tenant.create", "key.create"]),
        ("/admin/tenants/acme/keys", {}, ["key.create"]),
        (f"/admin/tenants/acme/keys/{extra}/revoke", {}, ["key.revoke"]),
        ("/admin/tenants/acme/suspend", {}, ["tenant.suspend"]),
        ("/admin/tenants/acme/resume", {}, ["tenant.resume"]),
        ("/admin/tenants/acme/policy", {"max_batch": "32"}, ["policy.set"]),
        (
            "/admin/tenants/acme/signing",
            {"signing_identities": "build@acme.example"},
            ["policy.set"],
        ),
        ("/admin/tenants/acme/quota", {"max_models": "7"}, ["quota.set"]),
        ("/admin/models/acme/m/1/delete", {}, ["model.delete"]),
    ]
    page = viewer.client.get("/admin/tenants/acme").text
    posted = set(re.findall(r'<form method="post" action="([^"]+)"', page))
    for path, fields, actions in forms:
        before = len(_audit(server))
        refused = viewer.post(path, **fields)
        assert refused.status_code == 403, (path, refused.text[:300])
        assert "ADMIN_ROLE_REQUIRED" in refused.text
        assert [(r["actor"], r["outcome"]) for r in _audit(server)[before:]] == [
            ("admin:vera", "denied")
        ], path
        done = admin.post(path, **fields)
        assert done.status_code in (200, 201, 303), (path, done.text[:300])
        rows = _audit(server)[before + 1 :]
        assert [(r["actor"], r["action"], r["outcome"]) for r in rows] == [
            ("admin:alice", action, "ok") for action in actions
        ], path
    tested = {re.sub(r"/keys/[0-9a-f]+/", "/keys/K/", p) for p, _, _ in forms}
    for action in posted - {"/admin/logout"}:
        assert re.sub(r"/keys/[0-9a-f]+/", "/keys/K/", action) in tested, action


# -- forwarded headers and the login limit -----------------------------------------------------


def _login_form(client: httpx2.Client) -> str:
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/admin/login").text)
    assert token is not None
    return token.group(1)


def test_forwarded_headers_are_ignored_without_trusted_proxies(
    served: Callable[..., Server],
) -> None:
    server = served(GRAPHGATE_CONSOLE_LOGIN_ATTEMPTS="10")
    client = httpx2.Client(base_url=server.url, timeout=60)
    statuses = []
    for i in range(40):
        forged = {"X-Forwarded-For": f"203.0.113.{i}"}
        data = {"key": "wrong", "csrf": _login_form(client)}  # each answer sets a new one
        statuses.append(client.post("/admin/login", data=data, headers=forged).status_code)
    assert statuses == [401] * 10 + [429] * 30
    clients = {r["client"] for r in _audit(server, action="login")}
    assert clients == {"127.0.0.1"}


def test_concurrent_wrong_logins_are_checked_at_most_the_limit(
    served: Callable[..., Server],
) -> None:
    server = served(GRAPHGATE_CONSOLE_LOGIN_ATTEMPTS="10")
    client = httpx2.Client(base_url=server.url, timeout=60)
    csrf = _login_form(client)
    cookies = dict(client.cookies)
    statuses: list[int] = []
    barrier = threading.Barrier(40)

    def attempt() -> None:
        with httpx2.Client(base_url=server.url, timeout=60, cookies=cookies) as own:
            barrier.wait()
            statuses.append(
                own.post("/admin/login", data={"key": "wrong", "csrf": csrf}).status_code
            )

    threads = [threading.Thread(target=attempt) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(statuses) == [401] * 10 + [429] * 30
    assert len(_audit(server, action="login")) == 10


def test_a_guessed_key_id_is_limited_from_any_client_address(
    served: Callable[..., Server],
) -> None:
    """Behind a trusted proxy every client has its own address; a key's id still counts."""
    server = served(GRAPHGATE_CONSOLE_LOGIN_ATTEMPTS="5", GRAPHGATE_TRUSTED_PROXIES="127.0.0.1")
    real = _operator(server, "alice", "admin")
    guessed = "_".join(real.split("_")[:2]) + "_not-the-secret"
    client = httpx2.Client(base_url=server.url, timeout=60)
    statuses = [
        client.post(
            "/admin/login",
            data={"key": guessed, "csrf": _login_form(client)},
            headers={"X-Forwarded-For": f"198.51.100.{i}"},
        ).status_code
        for i in range(8)
    ]
    assert statuses == [401] * 5 + [429] * 3
    clients = {r["client"] for r in _audit(server, action="login")}
    assert clients == {f"198.51.100.{i}" for i in range(5)}  # the proxy's word, trusted


# -- quotas and policy where the version registers ---------------------------------------------


@pytest.mark.parametrize("quota", ["max_versions", "max_models"])
def test_concurrent_uploads_store_exactly_the_quota(
    served: Callable[..., Server], quota: str
) -> None:
    server = served(GRAPHGATE_WORKERS="3", GRAPHGATE_COMPILE_THREADS="2")
    key = _tenant(server, "acme")
    # Every upload compiles at once (no per-tenant compile cap): they race at registration.
    limits = {quota: 2, "max_concurrent_uploads": 0}
    assert _call(server, "PUT", "/v1/admin/tenants/acme/quota", ADMIN_TOKEN, limits).is_success
    answers: list[httpx2.Response] = []
    barrier = threading.Barrier(8)

    def upload(i: int) -> None:
        barrier.wait()
        answers.append(_upload(server, key, f"m{i}" if quota == "max_models" else "m"))

    threads = [threading.Thread(target=upload, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    codes = sorted(a.status_code for a in answers)
    assert codes == [201, 201] + [403] * 6, [a.text[:200] for a in answers]
    assert {a.json()["code"] for a in answers if a.status_code == 403} == {"QUOTA_EXCEEDED"}
    listed = _call(server, "GET", "/v1/models", key).json()
    stored = [v for m in listed["models"] for v in m["versions"]] if "models" in listed else []
    assert len(stored) == 2


def test_a_policy_tightened_during_uploads_leaves_no_ready_version_over_it(
    served: Callable[..., Server],
) -> None:
    """Whatever the interleaving, a version that is ready passes the tenant's policy now: one
    that compiled under the old policy is blocked (409), never served as 422."""
    server = served(GRAPHGATE_WORKERS="2", GRAPHGATE_COMPILE_THREADS="2")
    key = _tenant(server, "acme")
    limits = {"max_concurrent_uploads": 0}
    assert _call(server, "PUT", "/v1/admin/tenants/acme/quota", ADMIN_TOKEN, limits).is_success
    big = mlp((8, 16, 16, 16, 16, 16, 4)).built()  # more ops than the policy will allow
    answers: list[httpx2.Response] = []
    uploads = [threading.Thread(target=lambda: answers.append(_upload(server, key, "m", big)))
               for _ in range(6)]  # fmt: skip
    for thread in uploads:
        thread.start()
    tightened = _call(server, "PUT", "/v1/admin/tenants/acme/policy", ADMIN_TOKEN, {"max_ops": 3})
    assert tightened.status_code == 200, tightened.text
    for thread in uploads:
        thread.join(300)
    versions = {a.json()["version"] for a in answers if a.status_code == 201}
    for version in sorted(versions):
        infer = httpx2.post(
            f"{server.url}/v2/models/m/versions/{version}/infer",
            json={
                "inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.0] * 8}]
            },
            headers=auth(key),
            timeout=60,
        )
        assert infer.status_code == 409, infer.text
        assert infer.json()["code"] == "MODEL_BLOCKED_BY_POLICY"
    rejected = [a for a in answers if a.status_code != 201]
    assert all(a.status_code == 422 for a in rejected), [a.text[:200] for a in rejected]


# -- bodies, paths and query values ------------------------------------------------------------


def test_operator_input_is_refused_with_a_code_never_a_500(served: Callable[..., Server]) -> None:
    server = served()
    key = _tenant(server, "acme")
    assert _upload(server, key, "m").status_code == 201
    huge = "99999999999999999999999"
    cases: list[tuple[str, str, Any, int, str, str]] = [
        ("PUT", "/v1/admin/tenants/acme/policy", {"max_opz": 5}, 400, "BAD_REQUEST", "max_opz"),
        ("PUT", "/v1/admin/tenants/acme/quota", {"max_modelz": 5}, 400, "BAD_REQUEST", "max_modelz"),
        ("PUT", "/v1/admin/models/acme/m/1/batching",
         {"max_batch_size": 4, "max_queue_delay_us": 0, "max_delay": 1}, 400, "BAD_REQUEST",
         "max_delay"),
        ("PUT", "/v1/admin/tenants/acme/policy", {"max_ops": True}, 400, "BAD_REQUEST", "max_ops"),
        ("PUT", "/v1/admin/tenants/acme/policy", {"max_ops": 0}, 400, "INVALID_POLICY", "max_ops"),
        ("GET", f"/v1/admin/audit?cursor={huge}", None, 400, "BAD_REQUEST", "cursor"),
        ("GET", f"/v1/admin/audit.jsonl?cursor={huge}", None, 400, "BAD_REQUEST", "cursor"),
        ("GET", "/v1/admin/audit?since=0001-01-01T00:00:00%2B05:00", None, 400, "BAD_REQUEST",
         "since"),
        ("GET", "/v1/admin/audit?until=9999-12-31T23:59:59-05:00", None, 400, "BAD_REQUEST",
         "until"),
        ("PUT", f"/v1/admin/models/acme/m/{huge}/batching",
         {"max_batch_size": 4, "max_queue_delay_us": 0}, 400, "BAD_REQUEST", "version"),
        ("POST", f"/v1/admin/quarantine/acme/m/{huge}/release", None, 400, "BAD_REQUEST",
         "version"),
        ("POST", "/v1/admin/tenants", {"name": "abc\n"}, 400, "INVALID_NAME", "abc"),
        ("POST", "/v1/admin/admins", {"name": "bob\n", "role": "viewer"}, 400, "INVALID_NAME",
         "bob"),
        ("PUT", "/v1/admin/tenants/acme%0A/policy", {"max_ops": 5}, 400, "INVALID_NAME", "acme"),
    ]  # fmt: skip
    for method, path, body, status, code, named in cases:
        answer = _call(server, method, path, ADMIN_TOKEN, body)
        assert answer.status_code == status, (path, answer.text)
        assert answer.json()["code"] == code, (path, answer.text)
        assert named in answer.json()["error"], (path, answer.text)
    model_newline = _upload(server, key, "m\n")
    assert model_newline.status_code == 400 and model_newline.json()["code"] == "INVALID_NAME"
    console = Console(server, _operator(server, "vera", "viewer"))
    for path in (
        f"/admin/audit?cursor={huge}",
        "/admin/audit?since=0001-01-01T00:00:00%2B05:00",
        "/admin/audit?until=9999-12-31T23:59:59-05:00",
        f"/admin/models/acme/m/{huge}",
        "/admin/models/acme/m%0A/1/onnx",
    ):
        answer = console.client.get(path)
        assert 400 <= answer.status_code < 500, (path, answer.status_code)
    download = console.client.get("/admin/models/acme/m/1/onnx")
    assert download.status_code == 200
    assert download.headers["content-disposition"].startswith(
        'attachment; filename="acme-m-v1.onnx"'
    )


# -- bounded diagnostics -----------------------------------------------------------------------


def test_an_op_named_with_a_megabyte_of_text_is_refused_in_a_small_answer(
    served: Callable[..., Server],
) -> None:
    server = served()
    key = _tenant(server, "acme")
    named = "x" * 1_000_000
    program = GraphBuilder()
    program.feed("x", FP32, [1, 4])
    program.node(named, {"X": ["x"]}, {"Out": [V("y", [1, 4])]})
    program.fetch("y")
    answer = _upload(server, key, "m", program.built())
    assert answer.status_code == 422, answer.text[:300]
    assert len(answer.content) <= 64 * 1024
    # The op's name is quoted (its op_type, its message) cut, nowhere longer than 200.
    assert "x" * 64 in answer.text and "x" * 201 not in answer.text
    kept = _call(server, "GET", "/v1/admin/tenants/acme/rejections", ADMIN_TOKEN)
    assert kept.status_code == 200 and len(kept.content) <= 64 * 1024
    page = Console(server, _operator(server, "vera", "viewer")).client.get(
        "/admin/models?tenant=acme"
    )
    assert page.status_code == 200 and len(page.content) <= 256 * 1024


def test_a_rejection_quotes_at_most_200_characters_of_any_name_and_64_kib_in_all() -> None:
    """Whatever a diagnostic quotes (a validator message may repeat a name whole), the
    rejection keeps 200 characters of it, 2 KiB of a message, 60 KB of diagnostics."""
    long_name = "y" * 5_000_000
    diagnostic = Diagnostic(
        Code.OP_UNKNOWN,
        f"expected a registered op type, got {long_name!r} in block 0",
        op_type=long_name,
        var=long_name,
    )
    rejected = ModelRejected("the program is rejected", [diagnostic] * 1000)
    body = json.dumps(
        {"error": rejected.message, "diagnostics": [d.to_json() for d in rejected.diagnostics]}
    )
    assert len(body.encode()) <= 64 * 1024
    assert "y" * 200 in body and "y" * 201 not in body
    assert all(len(d.message) <= 2048 for d in rejected.diagnostics)
    shown = len(rejected.diagnostics)
    assert 1 <= shown < 1000 and f"{1000 - shown} more not shown" in rejected.message
