"""Real signing material for the signed-upload tests: elliptic-curve key pairs, a throwaway CA
and leaf certificates made with `cryptography`, and bundles signed with the `model_signing`
library exactly as its CLI signs a model folder (`model_signing sign key|certificate`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    private: ec.EllipticCurvePrivateKey

    @property
    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public_pem(self) -> str:
        return (
            self.private.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    @property
    def fingerprint(self) -> str:
        """What `openssl pkey -pubin -outform DER | sha256sum` prints, as "sha256:<hex>"."""
        der = self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return f"sha256:{hashlib.sha256(der).hexdigest()}"


def ec_key_pair(curve: ec.EllipticCurve | None = None) -> KeyPair:
    return KeyPair(ec.generate_private_key(curve or ec.SECP256R1()))


@dataclass(frozen=True)
class Certified:
    """A certificate and the key pair it certifies."""

    key: KeyPair
    certificate: x509.Certificate

    @property
    def pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()


def now() -> datetime:
    return datetime.now(UTC)


def make_ca(common_name: str = "graphgate test CA") -> Certified:
    key = ec_key_pair()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now() - timedelta(days=365))
        .not_valid_after(now() + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(signing=False), critical=True)
        .sign(key.private, hashes.SHA256())
    )
    return Certified(key, certificate)


def issue_leaf(
    ca: Certified,
    email: str = "build@tenant-a.example",
    *,
    common_name: str = "tenant-a build",
    valid_from: datetime | None = None,
    valid_until: datetime | None = None,
) -> Certified:
    """A code-signing certificate for `email` (a SAN), issued by `ca`."""
    key = ec_key_pair()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from or now() - timedelta(days=1))
        .not_valid_after(valid_until or now() + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(signing=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=False)
        .sign(ca.key.private, hashes.SHA256())
    )
    return Certified(key, certificate)


def _usage(*, signing: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=signing,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=not signing,
        crl_sign=not signing,
        encipher_only=False,
        decipher_only=False,
    )


def model_folder(work: Path, files: Mapping[str, bytes]) -> Path:
    """A model folder holding `files`, as a tenant's build leaves it."""
    folder = work / "model"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def sign_with_key(key: KeyPair, files: Mapping[str, bytes], work: Path) -> bytes:
    """The bundle `model_signing sign key` writes for a folder of `files`."""
    import model_signing

    folder = model_folder(work, files)
    private = work / "signing.key"
    private.write_bytes(key.private_pem)
    signature = work / "model.sig"
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).sign(
        folder, signature
    )
    return signature.read_bytes()


def sign_with_certificate(
    leaf: Certified, chain: Sequence[Certified], files: Mapping[str, bytes], work: Path
) -> bytes:
    """The bundle `model_signing sign certificate` writes: `leaf` signs, `chain` goes along."""
    import model_signing

    folder = model_folder(work, files)
    private = work / "signing.key"
    private.write_bytes(leaf.key.private_pem)
    certificate = work / "signing.pem"
    certificate.write_text(leaf.pem)
    chain_file = work / "chain.pem"
    chain_file.write_text("".join(c.pem for c in chain))
    signature = work / "model.sig"
    model_signing.signing.Config().use_certificate_signer(
        private_key=private, signing_certificate=certificate, certificate_chain=[chain_file]
    ).sign(folder, signature)
    return signature.read_bytes()
