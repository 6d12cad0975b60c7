"""Content-addressed artifacts in an S3-compatible bucket: `prefix/ab/abcdef...` by sha256.

A PUT is atomic and durable when S3 answers it (there is no half-written object to clean up),
so `put` returning is the same promise the folder store's fsync-rename gives. The endpoint and
credentials come from boto3's standard sources (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, profiles, instance roles); nothing is configured here.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from server.settings import S3_URL
from server.storage import StorageUnavailable
from server.storage.artifacts import SHA256, ArtifactMissing

log = logging.getLogger("graphgate.storage")
_READ_BYTES: Final = 1024 * 1024  # how much of a spool file the MD5 reads at a time
_ABSENT: Final = frozenset({"404", "NoSuchKey", "NotFound"})
# Short timeouts and few retries: an upload fails with 503 within seconds when the store is
# down, rather than holding the client (and a server thread) for minutes.
_CLIENT_CONFIG: Final = Config(
    connect_timeout=3,
    read_timeout=30,
    retries={"max_attempts": 3, "mode": "standard"},
    # Not every S3-compatible server takes the CRC checksums newer botocore adds by default.
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
)


class S3Artifacts:
    """One bucket and key prefix; many replicas may share them (content addressing makes two
    puts of the same bytes the same object)."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._s3 = client if client is not None else boto3.client("s3", config=_CLIENT_CONFIG)

    @classmethod
    def from_url(cls, url: str) -> S3Artifacts:
        match = S3_URL.match(url)
        if match is None:
            raise ValueError(f"expected an artifacts URL like s3://bucket/prefix, got {url!r}")
        return cls(match["bucket"], match["prefix"] or "")

    def put(self, data: bytes, sha: str | None = None) -> str:
        """Stores `data` and returns its sha256 once S3 has acknowledged it.

        Always a PUT, even when the object exists: it cannot be verified cheaper than it can
        be rewritten, and a rewrite restarts its age, which garbage collection's grace period
        counts from (a concurrent GC never deletes bytes that an upload has just stored).
        """
        sha = sha or hashlib.sha256(data).hexdigest()
        md5 = hashlib.md5(data, usedforsecurity=False).digest()  # S3 checks the body against it
        self._call(
            "put_object",
            Bucket=self.bucket,
            Key=self._key(sha),
            Body=data,
            ContentMD5=base64.b64encode(md5).decode(),
        )
        return sha

    def put_file(self, path: Path, sha: str) -> str:
        """`put` of a spool file, streamed from disk (read once more for the MD5 S3 checks
        the body against, never held whole in memory)."""
        md5 = hashlib.md5(usedforsecurity=False)
        with path.open("rb") as f:
            while chunk := f.read(_READ_BYTES):
                md5.update(chunk)
            f.seek(0)
            self._call(
                "put_object",
                Bucket=self.bucket,
                Key=self._key(sha),
                Body=f,
                ContentMD5=base64.b64encode(md5.digest()).decode(),
            )
        return sha

    def get(self, sha: str) -> bytes:
        """The bytes stored under `sha`, verified against it."""
        try:
            answer = self._call("get_object", Bucket=self.bucket, Key=self._key(sha))
        except ClientError as error:
            raise ArtifactMissing(f"artifact {sha} is missing") from error
        data: bytes = answer["Body"].read()
        if hashlib.sha256(data).hexdigest() != sha:
            raise ArtifactMissing(f"artifact {sha} is corrupt: its bytes hash differently")
        return data

    def delete(self, sha: str) -> None:
        """Removes the object (absent already is fine: S3 deletes are idempotent)."""
        self._call("delete_object", Bucket=self.bucket, Key=self._key(sha))

    def list(self) -> Iterator[str]:
        """The sha256 of every object under the prefix (anything else there is ignored)."""
        return (sha for sha, _age in self.list_aged())

    def list_aged(self) -> Iterator[tuple[str, float]]:
        """(sha256, seconds since its LastModified, by this machine's clock) of every object
        under the prefix; every PUT restarts LastModified."""
        pages = self._call("get_paginator", "list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        try:
            for page in pages:
                now = datetime.now(UTC)
                for entry in page.get("Contents", ()):
                    name = str(entry["Key"]).rsplit("/", 1)[-1]
                    if SHA256.fullmatch(name):
                        yield name, (now - entry["LastModified"]).total_seconds()
        except (BotoCoreError, ClientError) as error:
            log.warning("artifact store: listing failed: %s", error)
            raise StorageUnavailable("the artifact store is unavailable, retry") from None

    def size(self, sha: str) -> int:
        """Bytes stored under `sha` (not verified), ArtifactMissing when absent."""
        try:
            answer = self._call("head_object", Bucket=self.bucket, Key=self._key(sha))
        except ClientError as error:
            raise ArtifactMissing(f"artifact {sha} is missing") from error
        return int(answer["ContentLength"])

    def sweep(self) -> int:
        # A failed PUT leaves no object behind, so there is nothing to sweep.
        return 0

    def ping(self) -> None:
        """Raises StorageUnavailable unless the bucket answers (for `graphgate doctor`)."""
        self._call("head_bucket", Bucket=self.bucket)

    def _key(self, sha: str) -> str:
        # NOTE: names are only ever our own hex digests, never a client string.
        if not SHA256.fullmatch(sha):
            raise ArtifactMissing(f"not a sha256: {sha!r}")
        return f"{self.prefix}/{sha[:2]}/{sha}" if self.prefix else f"{sha[:2]}/{sha}"

    def _call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """One S3 call; a missing object is ClientError (the caller decides), anything else
        that goes wrong (no connection, a timeout, a 5xx, denied) is StorageUnavailable."""
        try:
            return getattr(self._s3, operation)(*args, **kwargs)
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) in _ABSENT:
                raise
            failure: Exception = error
        except BotoCoreError as error:
            failure = error
        # NOTE: the details (endpoint, bucket) go to the log, not to the client.
        log.warning("artifact store: %s failed: %s", operation, failure)
        raise StorageUnavailable("the artifact store is unavailable; nothing was stored, retry")
