"""Signed models from the command line: the README's loop run as written against a real
`graphgate serve` (openssl makes the key, the `model_signing` CLI signs, `graphgate` checks,
uploads and lists), and `graphgate check --signature` offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner

from server.cli.main import app as cli
from tests.support.api import ADMIN_TOKEN, auth
from tests.support.builders import affine
from tests.support.served import Server
from tests.support.signing_material import (
    ec_key_pair,
    issue_leaf,
    make_ca,
    model_folder,
    now,
    sign_with_certificate,
    sign_with_key,
)

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
AFFINE = affine().built()
FILES = {"model.pdmodel": AFFINE.program, "model.pdiparams": AFFINE.params}


def readme_loop() -> list[str]:
    """The command lines of the first sh block of the README's "Signed models" section."""
    section = README.split("## Signed models\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.fixture
def served(tmp_path: Path, backend_env: dict[str, str]) -> Iterator[Server]:
    server = Server(tmp_path / "data", backend_env)
    server.start()
    yield server
    server.stop()


def run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One line as a shell runs it, `graphgate` and the venv's `model_signing` on the PATH."""
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_readme_loop_signs_uploads_and_shows_the_signer(served: Server, tmp_path: Path) -> None:
    created = httpx2.post(
        f"{served.url}/v1/admin/tenants", json={"name": "acme"}, headers=auth(ADMIN_TOKEN)
    )
    key = created.json()["key"]
    work = tmp_path / "build"
    model_folder(work, FILES)
    # `graphgate` as `pip install -e .` makes it, from this checkout (the venv's script may
    # be another checkout's).
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "graphgate").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m server.cli "$@"\n')
    (shims / "graphgate").chmod(0o755)
    env = {
        **os.environ,
        "PATH": os.pathsep.join((str(shims), str(BIN), os.environ["PATH"])),
        "PYTHONPATH": str(ROOT),
        "GRAPHGATE_URL": served.url,
        "GRAPHGATE_API_KEY": key,
        "GRAPHGATE_ADMIN_TOKEN": ADMIN_TOKEN,
    }
    outputs = []
    for line in readme_loop():
        done = run(line, work, env)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    public = (work / "build.pub").read_text()
    fingerprint = _openssl_fingerprint(work / "build.pub")

    check, upload, models = outputs[-3:]
    assert f"signed by key {fingerprint}" in check
    assert "uploaded 'classifier' version 1 (ready)" in upload
    assert f"signed by key {fingerprint}" in upload
    assert re.search(rf"│ signed +│.*\n.*│ key {fingerprint[:19]} +│", models)

    model = httpx2.get(f"{served.url}/v1/models/classifier", headers=auth(key)).json()
    assert model["provenance"]["key_fingerprint"] == fingerprint
    policy = httpx2.get(
        f"{served.url}/v1/admin/tenants/acme/policy", headers=auth(ADMIN_TOKEN)
    ).json()["policy"]
    assert policy["require_signature"] is True
    assert [k.strip() for k in policy["signing_keys"]] == [public.strip()]

    # Unsigned, or signed over other bytes: refused, exit 1, with the code and the file.
    unsigned = run("graphgate upload classifier model/model.pdmodel", work, env)
    assert unsigned.returncode == 1 and "[SIGNATURE_MISSING]" in unsigned.stderr
    (work / "model" / "model.pdiparams").write_bytes(AFFINE.params + b"\x00")
    tampered = run(
        "graphgate upload classifier model/model.pdmodel --params model/model.pdiparams "
        "--signature model.sig",
        work,
        env,
    )
    assert tampered.returncode == 1
    assert "model.pdiparams: expected sha256" in tampered.stderr
    assert "[SIGNATURE_MISMATCH]" in tampered.stderr

    audit = httpx2.get(
        f"{served.url}/v1/admin/audit?action=model.upload", headers=auth(ADMIN_TOKEN)
    ).json()["entries"]
    assert [e["outcome"] for e in audit] == ["rejected", "rejected", "ok"]
    assert audit[2]["detail"]["signer"] == fingerprint
    assert audit[0]["detail"]["file"] == "model.pdiparams"


def _openssl_fingerprint(public: Path) -> str:
    """What the README says prints the fingerprint: openssl's DER, sha256 of it."""
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-in", str(public), "-outform", "DER"],
        capture_output=True,
        check=True,
    ).stdout
    import hashlib

    return f"sha256:{hashlib.sha256(der).hexdigest()}"


# -- graphgate check --signature, offline ----------------------------------------------------


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", *args])
    return result.exit_code, result.output


def test_check_verifies_a_key_signature_offline(tmp_path: Path) -> None:
    key = ec_key_pair()
    bundle = sign_with_key(key, FILES, tmp_path / "signing")
    folder = model_folder(tmp_path / "upload", FILES)
    (tmp_path / "model.sig").write_bytes(bundle)
    (tmp_path / "key.pub").write_text(key.public_pem)
    program, signature, trusted = (
        str(folder / "model.pdmodel"),
        str(tmp_path / "model.sig"),
        str(tmp_path / "key.pub"),
    )

    code, output = _invoke(program, "--signature", signature, "--trusted-key", trusted)
    assert code == 0, output
    assert f"signed by key {key.fingerprint}" in output
    code, output = _invoke(program, "--signature", signature, "--trusted-key", trusted, "--json")
    assert code == 0 and json.loads(output)["provenance"]["key_fingerprint"] == key.fingerprint

    other = tmp_path / "other.pub"
    other.write_text(ec_key_pair().public_pem)
    code, output = _invoke(program, "--signature", signature, "--trusted-key", str(other))
    assert code == 1 and "[SIGNER_UNTRUSTED]" in output

    (folder / "model.pdmodel").write_bytes(AFFINE.program + b"\x00")
    code, output = _invoke(program, "--signature", signature, "--trusted-key", trusted)
    assert code == 1
    assert re.search(r"model\.pdmodel: expected sha256 \w+\.\.\. as signed", output)
    assert "[SIGNATURE_MISMATCH]" in output


def test_check_verifies_a_certificate_signature_offline(tmp_path: Path) -> None:
    ca = make_ca()
    email = "build@acme.example"
    leaf = issue_leaf(ca, email)
    bundle = sign_with_certificate(leaf, [ca], FILES, tmp_path / "signing")
    folder = model_folder(tmp_path / "upload", FILES)
    (tmp_path / "model.sig").write_bytes(bundle)
    (tmp_path / "ca.pem").write_text(ca.pem)
    base = [str(folder / "model.pdmodel"), "--signature", str(tmp_path / "model.sig")]
    trust = ["--trusted-ca", str(tmp_path / "ca.pem")]

    code, output = _invoke(*base, *trust, "--identity", email)
    assert code == 0, output
    assert f"signed by {email} (certificate, key {leaf.key.fingerprint})" in output
    code, output = _invoke(*base, *trust, "--identity", "someone@acme.example")
    assert code == 1 and "[SIGNER_UNTRUSTED]" in output

    expired = issue_leaf(
        ca, email, valid_from=now() - timedelta(days=3), valid_until=now() - timedelta(days=1)
    )
    (tmp_path / "expired.sig").write_bytes(
        sign_with_certificate(expired, [ca], FILES, tmp_path / "expired")
    )
    code, output = _invoke(
        str(folder / "model.pdmodel"),
        "--signature",
        str(tmp_path / "expired.sig"),
        *trust,
        "--identity",
        email,
    )
    assert code == 1 and "[CERTIFICATE_EXPIRED]" in output


def test_check_signature_options_are_used_together(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, FILES)
    program = str(folder / "model.pdmodel")
    (tmp_path / "model.sig").write_text("{}")
    code, output = _invoke(program, "--signature", str(tmp_path / "model.sig"))
    assert code == 2 and "expected --trusted-key or --trusted-ca with --signature" in output
    (tmp_path / "key.pub").write_text("not a key")
    code, output = _invoke(program, "--trusted-key", str(tmp_path / "key.pub"))
    assert code == 2 and "go with --signature" in output
    code, output = _invoke(
        program,
        "--signature",
        str(tmp_path / "model.sig"),
        "--trusted-key",
        str(tmp_path / "key.pub"),
    )
    assert code == 2 and "signing_keys: expected PEM public keys" in output
