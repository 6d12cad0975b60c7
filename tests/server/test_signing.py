"""The signature check itself (server/dispatch/signing.py), with bundles signed by the real
`model_signing` library: keys and a throwaway CA made here, nothing on the network."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from server.dispatch import signing
from server.dispatch.signing import SignatureCheck, SigningTrust
from server.errors import (
    CertificateExpired,
    CertificateNotYetValid,
    InvalidSigningCa,
    InvalidSigningKey,
    SignatureMalformed,
    SignatureMismatch,
    SignerUntrusted,
)
from tests.support.builders import affine
from tests.support.signing_material import (
    ec_key_pair,
    issue_leaf,
    make_ca,
    now,
    sign_with_certificate,
    sign_with_key,
)

AFFINE = affine().built()
PROGRAM, PARAMS = "model.pdmodel", "model.pdiparams"
FILES = {PROGRAM: AFFINE.program, PARAMS: AFFINE.params}
KEY = ec_key_pair()
OTHER_KEY = ec_key_pair()
CA = make_ca()
EMAIL = "build@tenant-a.example"


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every connection attempt fails the test: verification is offline."""
    attempts: list[Any] = []

    def refuse(_self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError(f"test: no network (connect to {address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield
    assert attempts == []


def key_trust(*keys: str) -> SigningTrust:
    return SigningTrust(keys=tuple(keys))


def ca_trust(*identities: str, ca: str = CA.pem) -> SigningTrust:
    return SigningTrust(ca=ca, identities=identities)


def test_a_key_signature_over_exactly_the_files_verifies(tmp_path: Path) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    trust = key_trust(OTHER_KEY.public_pem, KEY.public_pem)
    provenance = signing.verify(bundle, FILES, trust, now())
    assert provenance.method == "key"
    assert provenance.key_fingerprint == KEY.fingerprint
    assert provenance.signer == KEY.fingerprint


def test_the_worker_check_names_the_files_as_uploaded(tmp_path: Path) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    check = SignatureCheck(bundle, PROGRAM, PARAMS, key_trust(KEY.public_pem), now())
    assert check.verify(AFFINE.program, AFFINE.params).key_fingerprint == KEY.fingerprint
    renamed = SignatureCheck(bundle, "other.pdmodel", PARAMS, key_trust(KEY.public_pem), now())
    with pytest.raises(SignatureMismatch) as refused:
        renamed.verify(AFFINE.program, AFFINE.params)
    assert refused.value.file == "other.pdmodel"


@pytest.mark.parametrize("changed", [PROGRAM, PARAMS])
def test_one_changed_byte_is_a_mismatch_naming_the_file(tmp_path: Path, changed: str) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    tampered = dict(FILES)
    data = bytearray(tampered[changed])
    data[len(data) // 2] ^= 0x01
    tampered[changed] = bytes(data)
    with pytest.raises(SignatureMismatch) as refused:
        signing.verify(bundle, tampered, key_trust(KEY.public_pem), now())
    assert refused.value.file == changed
    assert refused.value.message.startswith(f"{changed}: expected sha256 ")
    assert refused.value.code == "SIGNATURE_MISMATCH"


def test_a_signature_over_another_file_set_is_a_mismatch(tmp_path: Path) -> None:
    more = {**FILES, "README.md": b"notes"}
    bundle = sign_with_key(KEY, more, tmp_path / "more")
    with pytest.raises(SignatureMismatch) as extra:
        signing.verify(bundle, FILES, key_trust(KEY.public_pem), now())
    assert extra.value.file == "README.md"
    program_only = sign_with_key(KEY, {PROGRAM: AFFINE.program}, tmp_path / "fewer")
    with pytest.raises(SignatureMismatch) as missing:
        signing.verify(program_only, FILES, key_trust(KEY.public_pem), now())
    assert missing.value.file == PARAMS


def test_a_signature_by_another_key_is_untrusted(tmp_path: Path) -> None:
    bundle = sign_with_key(OTHER_KEY, FILES, tmp_path)
    with pytest.raises(SignerUntrusted) as refused:
        signing.verify(bundle, FILES, key_trust(KEY.public_pem), now())
    assert refused.value.code == "SIGNER_UNTRUSTED"
    with pytest.raises(SignerUntrusted):
        signing.verify(bundle, FILES, SigningTrust(), now())


def test_a_forged_key_hint_does_not_pass_the_library_check(tmp_path: Path) -> None:
    """The bundle claims the trusted key (its hint) but was signed by another one."""
    bundle = json.loads(sign_with_key(OTHER_KEY, FILES, tmp_path))
    trusted = json.loads(sign_with_key(KEY, FILES, tmp_path / "trusted"))
    bundle["verificationMaterial"] = trusted["verificationMaterial"]
    with pytest.raises(SignerUntrusted) as refused:
        signing.verify(json.dumps(bundle).encode(), FILES, key_trust(KEY.public_pem), now())
    assert "InvalidSignature" in refused.value.message


def test_a_certificate_with_an_allowed_identity_verifies(tmp_path: Path) -> None:
    leaf = issue_leaf(CA, EMAIL)
    bundle = sign_with_certificate(leaf, [CA], FILES, tmp_path)
    provenance = signing.verify(bundle, FILES, ca_trust("someone@else.example", EMAIL), now())
    assert (provenance.method, provenance.signer) == ("certificate", EMAIL)
    assert provenance.key_fingerprint == leaf.key.fingerprint
    by_subject = signing.verify(bundle, FILES, ca_trust("CN=tenant-a build"), now())
    assert by_subject.signer == "CN=tenant-a build"


def test_a_certificate_for_another_identity_is_untrusted(tmp_path: Path) -> None:
    bundle = sign_with_certificate(issue_leaf(CA, "intern@tenant-a.example"), [CA], FILES, tmp_path)
    with pytest.raises(SignerUntrusted) as refused:
        signing.verify(bundle, FILES, ca_trust(EMAIL), now())
    assert refused.value.signer == "CN=tenant-a build"
    assert "intern@tenant-a.example" in refused.value.message
    with pytest.raises(SignerUntrusted):  # a CA and no identity allowed: nobody
        signing.verify(bundle, FILES, ca_trust(), now())


def test_a_certificate_of_another_ca_is_untrusted(tmp_path: Path) -> None:
    rogue = make_ca("rogue CA")
    bundle = sign_with_certificate(issue_leaf(rogue, EMAIL), [rogue], FILES, tmp_path)
    with pytest.raises(SignerUntrusted) as refused:
        signing.verify(bundle, FILES, ca_trust(EMAIL), now())
    assert refused.value.signer == EMAIL  # who it claims to be; the chain says otherwise
    assert "X509StoreContextError" in refused.value.message


def test_an_expired_or_future_leaf_is_refused_at_upload_time(tmp_path: Path) -> None:
    expired = issue_leaf(
        CA, EMAIL, valid_from=now() - timedelta(days=10), valid_until=now() - timedelta(days=1)
    )
    bundle = sign_with_certificate(expired, [CA], FILES, tmp_path / "expired")
    with pytest.raises(CertificateExpired) as refused:
        signing.verify(bundle, FILES, ca_trust(EMAIL), now())
    assert refused.value.code == "CERTIFICATE_EXPIRED"
    # The same signature, checked at a time inside the certificate's validity, passes.
    at = now() - timedelta(days=5)
    assert signing.verify(bundle, FILES, ca_trust(EMAIL), at).signer == EMAIL

    future = issue_leaf(CA, EMAIL, valid_from=now() + timedelta(days=1))
    bundle = sign_with_certificate(future, [CA], FILES, tmp_path / "future")
    with pytest.raises(CertificateNotYetValid):
        signing.verify(bundle, FILES, ca_trust(EMAIL), now())


def test_a_key_signature_needs_keys_and_a_certificate_one_a_ca(tmp_path: Path) -> None:
    key_bundle = sign_with_key(KEY, FILES, tmp_path / "key")
    with pytest.raises(SignerUntrusted):
        signing.verify(key_bundle, FILES, ca_trust(EMAIL), now())
    certificate_bundle = sign_with_certificate(issue_leaf(CA, EMAIL), [CA], FILES, tmp_path)
    with pytest.raises(SignerUntrusted):
        signing.verify(certificate_bundle, FILES, key_trust(KEY.public_pem), now())


# -- bundles that are not bundles ------------------------------------------------------------


def _malformed(bundle: bytes) -> SignatureMalformed:
    with pytest.raises(SignatureMalformed) as refused:
        signing.verify(bundle, FILES, key_trust(KEY.public_pem), now())
    assert refused.value.code == "SIGNATURE_MALFORMED"
    return refused.value


def test_a_50_mb_bundle_is_refused_by_its_size() -> None:
    huge = b'{"mediaType": "' + b"a" * (50 * 2**20) + b'"}'
    assert "at most 1.0 MiB, got 50.0 MiB" in _malformed(huge).message


def test_a_deeply_nested_bundle_is_refused() -> None:
    nested = b"[" * 200_000 + b"]" * 200_000
    assert "nested too deep" in _malformed(nested).message
    inside = b'{"mediaType": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    _malformed(inside)


def test_a_deeply_nested_payload_is_refused(tmp_path: Path) -> None:
    bundle = json.loads(sign_with_key(KEY, FILES, tmp_path))
    payload = b'{"_type": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    assert "nested too deep" in _malformed(json.dumps(bundle).encode()).message


@pytest.mark.parametrize(
    "bundle",
    [
        b"",
        b"\xff\xfe not json",
        b"[]",
        b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}',
        b'{"mediaType": "text/plain", "verificationMaterial": {}, "dsseEnvelope": {}}',
    ],
)
def test_garbage_is_malformed(bundle: bytes) -> None:
    _malformed(bundle)


def test_fields_changed_or_added_are_malformed(tmp_path: Path) -> None:
    good = json.loads(sign_with_key(KEY, FILES, tmp_path))

    def changed(path: tuple[str, ...], value: Any) -> bytes:
        copy = json.loads(json.dumps(good))
        holder = copy
        for step in path[:-1]:
            holder = holder[step]
        holder[path[-1]] = value
        return json.dumps(copy).encode()

    _malformed(changed(("dsseEnvelope", "payload"), "not base64!"))
    _malformed(changed(("dsseEnvelope", "signatures"), []))
    _malformed(changed(("dsseEnvelope", "payloadType"), "application/json"))
    _malformed(changed(("verificationMaterial", "tlogEntries"), [{"logIndex": "1"}]))
    _malformed(changed(("extra",), {"x": 1}))
    certificate = {"certificates": [{"rawBytes": base64.b64encode(b"not DER").decode()}]}
    _malformed(changed(("verificationMaterial", "x509CertificateChain"), certificate))


# -- trust, as an operator sets it -------------------------------------------------------------


def test_keys_are_read_from_pem_and_one_that_does_not_parse_is_refused() -> None:
    keys = signing.public_keys_in(KEY.public_pem + "\n" + OTHER_KEY.public_pem)
    assert [signing.fingerprint_of_pem(k) for k in keys] == [KEY.fingerprint, OTHER_KEY.fingerprint]
    broken = KEY.public_pem.replace(KEY.public_pem.splitlines()[1], "AAAA" * 16)
    with pytest.raises(InvalidSigningKey):
        signing.public_keys_in(broken)
    with pytest.raises(InvalidSigningKey):
        signing.public_keys_in("not a key")


def test_a_key_model_signing_cannot_verify_with_is_refused() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    edwards = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(InvalidSigningKey) as refused:
        signing.public_keys_in(edwards.decode())
    assert "elliptic-curve key" in refused.value.message


def test_a_ca_bundle_must_hold_ca_certificates() -> None:
    assert signing.ca_certificates_in(CA.pem)[0] == CA.certificate
    with pytest.raises(InvalidSigningCa):
        signing.ca_certificates_in(issue_leaf(CA).pem)
    with pytest.raises(InvalidSigningCa):
        signing.ca_certificates_in("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
