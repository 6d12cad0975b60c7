"""Signed uploads: an OpenSSF Model Signing bundle checked against a tenant's trust, offline.

The compile worker runs `verify` before validation; `graphgate check --signature` runs it
locally. A bundle is a sigstore bundle whose DSSE payload is an in-toto statement listing every
signed file with its digest (`model_signing sign key|certificate`). Only the key and
certificate modes are taken: nothing here reaches a network (no sigstore public-good instance,
no transparency log, no OS trust store).

The steps, each with its own refusal (server/errors.py `SignatureRefused`):
1. the bundle's shape, parsed here within its byte cap: SIGNATURE_MALFORMED;
2. its signed manifest against the uploaded files, by the names they were uploaded under:
   exactly those files, with their digests (SIGNATURE_MISMATCH, naming the file);
3. the signer against the tenant's trust: one of its keys, or a certificate valid at upload
   time (CERTIFICATE_EXPIRED, CERTIFICATE_NOT_YET_VALID) with an allowed identity
   (SIGNER_UNTRUSTED);
4. the `model_signing` library's own verification (the DSSE signature, the certificate chain to
   the tenant's CA, the files hashed again): SIGNER_UNTRUSTED when it fails.
Steps 1-3 are graphgate's so that each refusal says what it is; step 4 is the library's public
API (`model_signing.verifying.Config`), which checks the cryptography.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from server.errors import (
    CertificateExpired,
    CertificateNotYetValid,
    InvalidSigningCa,
    InvalidSigningKey,
    SignatureMalformed,
    SignatureMismatch,
    SignerUntrusted,
)

if TYPE_CHECKING:
    from model_signing.verifying import Config as VerifyingConfig

# A key- or certificate-signed bundle of two files is 2-5 KiB; its chain a few KiB more.
MAX_BUNDLE_BYTES: Final = 1024 * 1024
MAX_CHAIN_CERTIFICATES: Final = 8
MAX_RESOURCES: Final = 10_000
# What an operator may trust per tenant.
MAX_KEYS: Final = 32
MAX_CA_CERTIFICATES: Final = 64
MAX_IDENTITIES: Final = 64
MAX_IDENTITY_CHARS: Final = 512
MAX_TRUST_PEM_CHARS: Final = 256 * 1024

KEY: Final = "key"
CERTIFICATE: Final = "certificate"
BUNDLE_MEDIA_TYPE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
_IN_TOTO_PAYLOAD: Final = "application/vnd.in-toto+json"
_IN_TOTO_STATEMENT: Final = "https://in-toto.io/Statement/v1"
_MODEL_SIGNING_V1: Final = "https://model_signing/signature/v1.0"
_CURVES: Final = ("secp256r1", "secp384r1", "secp521r1")  # what model_signing signs with
_PEM_KEY: Final = re.compile(
    r"-----BEGIN PUBLIC KEY-----\r?\n.*?-----END PUBLIC KEY-----", re.DOTALL
)
# Resource digest algorithms as model_signing names them -> the hash.
_HASHES: Final[Mapping[str, Callable[[bytes], str]]] = {
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
    "blake2b": lambda data: hashlib.blake2b(data).hexdigest(),
    "blake3": lambda data: _blake3(data),
}


@dataclass(frozen=True, slots=True)
class SigningTrust:
    """Whom a tenant trusts to sign its uploads: PEM public keys (one each), a PEM bundle of CA
    certificates, and the certificate identities (subjects or SANs) it allows."""

    keys: tuple[str, ...] = ()
    ca: str = ""
    identities: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.keys and not self.ca


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who signed a version: `signer` is the allowed certificate identity that matched, or the
    key's fingerprint for a key signature; `key_fingerprint` is "sha256:" and the hex SHA-256
    of the signing key's DER SubjectPublicKeyInfo (`openssl pkey -pubin -outform DER | sha256sum`)."""

    method: str  # KEY or CERTIFICATE
    signer: str
    key_fingerprint: str

    def to_json(self) -> dict[str, str]:
        return {
            "method": self.method,
            "signer": self.signer,
            "key_fingerprint": self.key_fingerprint,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Provenance:
        return cls(str(doc["method"]), str(doc["signer"]), str(doc["key_fingerprint"]))


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """What the compile worker verifies before validating: the bundle, the names the program and
    params were uploaded under, the tenant's trust and the upload's time (aware UTC)."""

    bundle: bytes
    program_name: str
    params_name: str | None
    trust: SigningTrust
    at: datetime

    def verify(self, program: bytes, params: bytes | None) -> Provenance:
        files = _uploaded_files(self.program_name, program, self.params_name, params)
        return verify(self.bundle, files, self.trust, self.at)


def verify(
    bundle: bytes, files: Mapping[str, bytes], trust: SigningTrust, at: datetime
) -> Provenance:
    """Who signed exactly `files` (name -> bytes) according to `bundle`, if `trust` trusts them
    at `at`; else the SignatureRefused that says why."""
    parsed = parse_bundle(bundle)
    check_files(parsed.manifest, files)
    if parsed.method == KEY:
        return _verify_with_keys(parsed, files, trust)
    return _verify_with_certificate(parsed, files, trust, at)


# -- trust, as an operator sets it ----------------------------------------------------------------


def public_keys_in(text: str) -> tuple[str, ...]:
    """Each PEM public key in `text`, re-encoded; InvalidSigningKey unless there is at least one
    and each is an elliptic-curve key model_signing verifies (P-256, P-384, P-521)."""
    if len(text) > MAX_TRUST_PEM_CHARS:
        raise InvalidSigningKey(
            f"signing_keys: expected at most {MAX_TRUST_PEM_CHARS} characters of PEM, "
            f"got {len(text)}"
        )
    blocks = _PEM_KEY.findall(text)
    if not blocks:
        raise InvalidSigningKey(
            f"signing_keys: expected PEM public keys (-----BEGIN PUBLIC KEY-----), got {text[:40]!r}"
        )
    return tuple(_pem(_ec_public_key(block)) for block in blocks)


def ca_certificates_in(text: str) -> tuple[x509.Certificate, ...]:
    """The certificates of a PEM CA bundle; InvalidSigningCa unless each parses and is a CA."""
    if len(text) > MAX_TRUST_PEM_CHARS:
        raise InvalidSigningCa(
            f"signing_ca: expected at most {MAX_TRUST_PEM_CHARS} characters of PEM, got {len(text)}"
        )
    try:
        certificates = tuple(x509.load_pem_x509_certificates(text.encode()))
    except ValueError as e:
        raise InvalidSigningCa(
            f"signing_ca: expected PEM certificates (-----BEGIN CERTIFICATE-----), got one "
            f"that does not parse: {e}"
        ) from None
    if len(certificates) > MAX_CA_CERTIFICATES:
        raise InvalidSigningCa(
            f"signing_ca: expected at most {MAX_CA_CERTIFICATES} certificates, "
            f"got {len(certificates)}"
        )
    for certificate in certificates:
        if not _is_ca(certificate):
            raise InvalidSigningCa(
                "signing_ca: expected CA certificates (basicConstraints CA:TRUE), got "
                f"{certificate.subject.rfc4514_string()!r}, which is not one"
            )
    return certificates


def key_fingerprint(public_key: Any) -> str:
    """ "sha256:" and the hex SHA-256 of a public key's DER SubjectPublicKeyInfo."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"sha256:{hashlib.sha256(der).hexdigest()}"


def fingerprint_of_pem(pem: str) -> str:
    return key_fingerprint(serialization.load_pem_public_key(pem.encode()))


def certificate_identities(certificate: x509.Certificate) -> tuple[str, ...]:
    """The identities an allowed one is matched against: the subject as RFC 4514 text
    ("CN=build,O=acme"), then each e-mail, URI and DNS subject alternative name."""
    found = [certificate.subject.rfc4514_string()]
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return tuple(found)
    for kind in (x509.RFC822Name, x509.UniformResourceIdentifier, x509.DNSName):
        found.extend(str(value) for value in names.get_values_for_type(kind))
    return tuple(found)


# -- the bundle -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Manifest:
    """The signed statement's files: name -> (algorithm, hex digest)."""

    files: Mapping[str, tuple[str, str]]


@dataclass(frozen=True, slots=True)
class ParsedBundle:
    method: str  # KEY or CERTIFICATE
    manifest: Manifest
    key_hint: str  # KEY: sha256 of the signer's PEM key as model_signing writes it ("" none)
    chain: tuple[x509.Certificate, ...]  # CERTIFICATE: the signing certificate first
    canonical: bytes  # the bundle with only the fields read here, for the library


def parse_bundle(bundle: bytes) -> ParsedBundle:
    """The bundle's shape, read without trusting it; SignatureMalformed for anything else."""
    check_bundle_size(bundle)
    document = _object(_json(bundle, "the signature bundle"), "the signature bundle")
    _only(document, {"mediaType", "verificationMaterial", "dsseEnvelope"}, "the bundle")
    media_type = document.get("mediaType")
    if media_type != BUNDLE_MEDIA_TYPE:
        raise SignatureMalformed(
            f"expected a bundle of mediaType {BUNDLE_MEDIA_TYPE}, got {_short(media_type)}"
        )
    material = _object(document.get("verificationMaterial"), "verificationMaterial")
    envelope = _object(document.get("dsseEnvelope"), "dsseEnvelope")
    payload, signature = _envelope(envelope)
    manifest = _manifest(payload)
    method, key_hint, chain, canonical_material = _material(material)
    canonical = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": canonical_material,
        "dsseEnvelope": {
            "payload": envelope["payload"],
            "payloadType": _IN_TOTO_PAYLOAD,
            "signatures": [{"sig": signature, "keyid": ""}],
        },
    }
    return ParsedBundle(method, manifest, key_hint, chain, json.dumps(canonical).encode())


def check_bundle_size(bundle: bytes) -> None:
    if len(bundle) > MAX_BUNDLE_BYTES:
        raise SignatureMalformed(
            f"expected a signature bundle of at most {_mib(MAX_BUNDLE_BYTES)}, "
            f"got {_mib(len(bundle))}"
        )


def _json(raw: bytes | str, what: str) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        raise SignatureMalformed(f"expected {what} as JSON, got one nested too deep") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SignatureMalformed(f"expected {what} as JSON, got {e}") from None


def _envelope(envelope: Mapping[str, Any]) -> tuple[bytes, str]:
    """The DSSE payload (decoded) and its one signature (base64, as it came)."""
    _only(envelope, {"payload", "payloadType", "signatures"}, "dsseEnvelope")
    if envelope.get("payloadType") != _IN_TOTO_PAYLOAD:
        raise SignatureMalformed(
            f"expected dsseEnvelope.payloadType {_IN_TOTO_PAYLOAD}, "
            f"got {_short(envelope.get('payloadType'))}"
        )
    payload = _base64(envelope.get("payload"), "dsseEnvelope.payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or len(signatures) != 1:
        count = len(signatures) if isinstance(signatures, list) else _short(signatures)
        raise SignatureMalformed(f"expected one DSSE signature, got {count}")
    entry = _object(signatures[0], "the DSSE signature")
    _only(entry, {"sig", "keyid"}, "the DSSE signature")
    _base64(entry.get("sig"), "the DSSE signature's sig")
    return payload, str(entry["sig"])


def _manifest(payload: bytes) -> Manifest:
    statement = _object(_json(payload, "the DSSE payload"), "the in-toto statement")
    if statement.get("_type") != _IN_TOTO_STATEMENT:
        raise SignatureMalformed(
            f"expected an in-toto statement {_IN_TOTO_STATEMENT}, got {_short(statement.get('_type'))}"
        )
    if statement.get("predicateType") != _MODEL_SIGNING_V1:
        raise SignatureMalformed(
            f"expected predicateType {_MODEL_SIGNING_V1} (model_signing 1.x), "
            f"got {_short(statement.get('predicateType'))}"
        )
    predicate = _object(statement.get("predicate"), "the predicate")
    serialization_args = _object(predicate.get("serialization"), "predicate.serialization")
    if serialization_args.get("method") != "files":
        raise SignatureMalformed(
            "expected a manifest of whole files (serialization method 'files'), "
            f"got {_short(serialization_args.get('method'))}"
        )
    resources = predicate.get("resources")
    if not isinstance(resources, list) or len(resources) > MAX_RESOURCES:
        got = f"{len(resources)} of them" if isinstance(resources, list) else _short(resources)
        raise SignatureMalformed(
            f"expected predicate.resources as a list of at most {MAX_RESOURCES}, got {got}"
        )
    files: dict[str, tuple[str, str]] = {}
    for resource in resources:
        name, algorithm, digest = _resource(resource)
        if name in files:
            raise SignatureMalformed(f"expected each signed file once, got {name!r} twice")
        files[name] = (algorithm, digest)
    return Manifest(files)


def _resource(resource: Any) -> tuple[str, str, str]:
    entry = _object(resource, "a signed resource")
    name, algorithm, digest = entry.get("name"), entry.get("algorithm"), entry.get("digest")
    if not isinstance(name, str) or not isinstance(digest, str):
        raise SignatureMalformed(
            f"expected a signed resource with a name and a digest, got {_short(entry)}"
        )
    if algorithm not in _HASHES:
        raise SignatureMalformed(
            f"{name}: expected a digest algorithm of {', '.join(_HASHES)}, got {_short(algorithm)}"
        )
    return name, str(algorithm), digest.lower()


def _material(
    material: Mapping[str, Any],
) -> tuple[str, str, tuple[x509.Certificate, ...], dict[str, Any]]:
    """(method, key hint, chain, the material as the library reads it)."""
    _only(material, {"publicKey", "x509CertificateChain", "tlogEntries"}, "verificationMaterial")
    if material.get("tlogEntries", []) != []:
        raise SignatureMalformed(
            "expected a key or certificate signature without transparency-log entries, got a "
            "sigstore (keyless) bundle: graphgate verifies offline, with the tenant's own trust"
        )
    if ("publicKey" in material) == ("x509CertificateChain" in material):
        raise SignatureMalformed(
            "expected verificationMaterial with one of publicKey (a key signature) or "
            f"x509CertificateChain (a certificate signature), got {sorted(material)}"
        )
    if "publicKey" in material:
        key = _object(material["publicKey"], "verificationMaterial.publicKey")
        _only(key, {"hint", "rawBytes", "keyDetails"}, "verificationMaterial.publicKey")
        hint = key.get("hint") or ""
        if not isinstance(hint, str):
            raise SignatureMalformed(f"expected publicKey.hint as text, got {_short(hint)}")
        return KEY, hint, (), {"publicKey": {"hint": hint or None}, "tlogEntries": []}
    chain = _chain(material["x509CertificateChain"])
    raw = [{"rawBytes": _b64(c.public_bytes(serialization.Encoding.DER))} for c in chain]
    canonical = {"x509CertificateChain": {"certificates": raw}, "tlogEntries": []}
    return CERTIFICATE, "", chain, canonical


def _chain(value: Any) -> tuple[x509.Certificate, ...]:
    holder = _object(value, "x509CertificateChain")
    _only(holder, {"certificates"}, "x509CertificateChain")
    entries = holder.get("certificates")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_CHAIN_CERTIFICATES:
        got = f"{len(entries)}" if isinstance(entries, list) else _short(entries)
        raise SignatureMalformed(
            f"expected 1 to {MAX_CHAIN_CERTIFICATES} certificates in the chain, got {got}"
        )
    chain = []
    for index, entry in enumerate(entries):
        holder = _object(entry, f"certificate {index}")
        _only(holder, {"rawBytes"}, f"certificate {index}")
        der = _base64(holder.get("rawBytes"), f"certificate {index}")
        try:
            chain.append(x509.load_der_x509_certificate(der))
        except ValueError as e:
            raise SignatureMalformed(
                f"expected certificate {index} as DER X.509, got one that does not parse: {e}"
            ) from None
    return tuple(chain)


# -- the files ------------------------------------------------------------------------------------


def check_files(manifest: Manifest, files: Mapping[str, bytes]) -> None:
    """SignatureMismatch unless the manifest lists exactly `files`, each with its digest."""
    for name, data in files.items():
        signed = manifest.files.get(name)
        if signed is None:
            listed = ", ".join(sorted(manifest.files)[:5]) or "no file"
            raise SignatureMismatch(
                f"{name}: expected a file the signature lists ({listed}), got one it does not list",
                file=name,
            )
        algorithm, digest = signed
        actual = _HASHES[algorithm](data)
        if actual != digest:
            raise SignatureMismatch(
                f"{name}: expected {algorithm} {digest[:16]}... as signed, got {actual[:16]}...",
                file=name,
            )
    if unsent := sorted(set(manifest.files) - set(files)):
        raise SignatureMismatch(
            f"expected the signature to list only the uploaded files ({', '.join(files)}), got "
            f"{', '.join(unsent[:5])} too",
            file=unsent[0],
        )


def _uploaded_files(
    program_name: str, program: bytes, params_name: str | None, params: bytes | None
) -> dict[str, bytes]:
    files = {_plain_name(program_name): program}
    if params is not None:
        name = _plain_name(params_name or "")
        if name in files:
            raise SignatureMismatch(
                f"expected the program and the params under two file names, got {name!r} twice",
                file=name,
            )
        files[name] = params
    return files


def _plain_name(name: str) -> str:
    """A file name as the signer's directory held it: no folder, nothing a path would read."""
    bad = not name or name in {".", ".."} or any(c in name for c in "/\\\0")
    if bad or len(name.encode()) > 255:
        raise SignatureMismatch(
            f"expected the uploaded files under plain file names (as signed), got {name!r}",
            file=name,
        )
    return name


# -- the signer -----------------------------------------------------------------------------------


def _verify_with_keys(
    parsed: ParsedBundle, files: Mapping[str, bytes], trust: SigningTrust
) -> Provenance:
    if not trust.keys:
        raise SignerUntrusted(
            "expected a signature by one of the tenant's signing_keys, got a key signature "
            "while it trusts no key"
        )
    # The library's hint names the key (sha256 of its PEM): only that key is tried.
    candidates = [k for k in trust.keys if not parsed.key_hint or _hint(k) == parsed.key_hint]
    if not candidates:
        raise SignerUntrusted(
            f"expected a signature by one of the tenant's {len(trust.keys)} signing_keys, "
            f"got one by another key (hint {parsed.key_hint[:16]}...)"
        )
    failure = ""
    for pem in candidates:
        try:
            _library_verify(parsed, files, {"key.pub": pem}, _key_verifier)
        except SignerUntrusted as refused:
            failure = refused.message
            continue
        fingerprint = fingerprint_of_pem(pem)
        return Provenance(KEY, fingerprint, fingerprint)
    raise SignerUntrusted(failure)


def _verify_with_certificate(
    parsed: ParsedBundle, files: Mapping[str, bytes], trust: SigningTrust, at: datetime
) -> Provenance:
    leaf = parsed.chain[0]
    identities = certificate_identities(leaf)
    signer = identities[0]
    if not trust.ca:
        raise SignerUntrusted(
            "expected a certificate issued under the tenant's signing_ca, got a certificate "
            "signature while it trusts no CA",
            signer=signer,
        )
    _check_validity(parsed.chain, trust, at, signer)
    allowed = [i for i in identities if i in trust.identities]
    if not allowed:
        wanted = ", ".join(trust.identities[:5]) or "none: the tenant allows no identity yet"
        raise SignerUntrusted(
            f"expected a certificate for one of the tenant's signing_identities ({wanted}), "
            f"got one for {', '.join(identities[:5])}",
            signer=signer,
        )
    _library_verify(parsed, files, {"ca.pem": trust.ca}, _certificate_verifier, signer=allowed[0])
    return Provenance(CERTIFICATE, allowed[0], key_fingerprint(leaf.public_key()))


def _check_validity(
    chain: Sequence[x509.Certificate], trust: SigningTrust, at: datetime, signer: str
) -> None:
    """Every certificate of the chain, and the tenant CA it ends at, valid at upload time.
    NOTE: model_signing checks the chain at the signing certificate's notBefore, so an expired
    certificate passes it; upload time is checked here."""
    roots = [
        ca
        for ca in x509.load_pem_x509_certificates(trust.ca.encode())
        if ca.subject == chain[-1].issuer
    ]
    for certificate in (*chain, *roots[:1]):
        name = certificate.subject.rfc4514_string()
        if at < certificate.not_valid_before_utc:
            raise CertificateNotYetValid(
                f"expected certificate {name!r} valid at upload time {_iso(at)}, got one valid "
                f"from {_iso(certificate.not_valid_before_utc)}",
                signer=signer,
            )
        if at > certificate.not_valid_after_utc:
            raise CertificateExpired(
                f"expected certificate {name!r} valid at upload time {_iso(at)}, got one that "
                f"expired {_iso(certificate.not_valid_after_utc)}",
                signer=signer,
            )


def _key_verifier(config: VerifyingConfig, folder: Path) -> None:
    config.use_elliptic_key_verifier(public_key=folder / "key.pub")


def _certificate_verifier(config: VerifyingConfig, folder: Path) -> None:
    # Never empty: an empty chain would make the library trust the OS's roots (certifi).
    config.use_certificate_verifier(certificate_chain=[folder / "ca.pem"])


def _library_verify(
    parsed: ParsedBundle,
    files: Mapping[str, bytes],
    trust_files: Mapping[str, str],
    configure: Callable[[VerifyingConfig, Path], None],
    *,
    signer: str | None = None,
) -> None:
    """model_signing's verification of the files (in a private folder, as it reads them) with
    the bundle; SignerUntrusted when it fails: the shape and the manifest passed above, so what
    is left is the signature and its chain of trust."""
    import model_signing  # ~1 s of imports (sigstore's models): only once a signature comes

    with tempfile.TemporaryDirectory(prefix="graphgate-signed-") as scratch:
        folder = Path(scratch)
        model = folder / "model"
        model.mkdir()
        for name, data in files.items():
            (model / name).write_bytes(data)
        for name, pem in trust_files.items():
            (folder / name).write_text(pem)
        (folder / "model.sig").write_bytes(parsed.canonical)
        config = model_signing.verifying.Config()  # type: ignore[no-untyped-call]  # its __init__ is unannotated
        try:
            configure(config, folder)
            # It prints a warning for bundles without a key hint: not the worker's stdout's.
            with contextlib.redirect_stdout(io.StringIO()):
                config.verify(model, folder / "model.sig")
        except MemoryError:
            raise
        except Exception as e:
            raise SignerUntrusted(
                f"expected a signature that verifies with the tenant's trust, got "
                f"{type(e).__name__}: {str(e)[:300] or 'no detail'}",
                signer=signer,
            ) from None


# -- helpers --------------------------------------------------------------------------------------


def _ec_public_key(pem: str) -> ec.EllipticCurvePublicKey:
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except ValueError as e:
        raise InvalidSigningKey(
            f"signing_keys: expected a PEM public key, got one that does not parse: {e}"
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _CURVES:
        got = key.curve.name if isinstance(key, ec.EllipticCurvePublicKey) else type(key).__name__
        raise InvalidSigningKey(
            f"signing_keys: expected an elliptic-curve key on {', '.join(_CURVES)}, got {got}"
        )
    return key


def _pem(key: ec.EllipticCurvePublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def _hint(pem: str) -> str:
    """model_signing's key hint: the hex SHA-256 of the key's PEM (as cryptography writes it)."""
    return hashlib.sha256(pem.encode()).hexdigest()


def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    return constraints.value.ca


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SignatureMalformed(f"expected {what} as a JSON object, got {_short(value)}")
    return value


def _only(value: Mapping[str, Any], known: set[str], what: str) -> None:
    if unknown := sorted(set(value) - known):
        raise SignatureMalformed(
            f"expected {what} with fields of {sorted(known)}, got also {unknown[:5]}"
        )


def _base64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureMalformed(f"expected {what} as base64 text, got {_short(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureMalformed(f"expected {what} as base64, got {value[:40]!r}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _blake3(data: bytes) -> str:
    import blake3  # model_signing's own dependency

    return str(blake3.blake3(data).hexdigest())


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
