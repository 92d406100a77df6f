"""Content-addressed blob stores: a blob's key is ``blobs/sha256/<hex[:2]>/<hex>``.

A blob is written once under the sha256 of its bytes and never changed, so ``put`` of
a blob already there does nothing and a reader needs no lock. Both stores take a file
the caller has already verified (the launcher's staging, ``services/launcher/artifacts``)
and read back byte ranges, which is what a node's download asks for, chunk by chunk.

- ``DirectoryStore``: files under a directory. A blob is written to a temporary name in
  its final directory, fsynced, renamed into place and the directory fsynced: a crash
  leaves the old state or the whole blob, never a torn one under a blob's name.
- ``S3Store``: objects in a bucket, through boto3, whose calls block: each runs in a
  thread (``asyncio.to_thread``) so the launcher's event loop keeps answering.

The contract tests (``tests/shared/test_artifact_store.py``) run against both.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from shared.artifacts.manifest import check_sha256
from shared.artifacts.settings import ArtifactSettings

if TYPE_CHECKING:
    from botocore.client import BaseClient


def blob_key(sha256: str) -> str:
    check_sha256(sha256)
    return f"blobs/sha256/{sha256[:2]}/{sha256}"


class StoreError(Exception):
    """The store could not be read or written (its message says which and why)."""


class ArtifactStore(Protocol):
    """Blobs by sha256."""

    async def has(self, sha256: str) -> bool:
        """Whether the blob is stored."""
        ...

    async def size(self, sha256: str) -> int | None:
        """The blob's size, None if it is not stored."""
        ...

    async def put(self, sha256: str, source: Path) -> None:
        """Store ``source`` (verified by the caller to hash to ``sha256``) as the blob;
        nothing happens if it is there already. ``source`` is left as it was."""
        ...

    async def read(self, sha256: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the blob from ``offset`` (fewer at its end)."""
        ...


class DirectoryStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, sha256: str) -> Path:
        return self.root / blob_key(sha256)

    async def has(self, sha256: str) -> bool:
        return self.path_of(sha256).is_file()

    async def size(self, sha256: str) -> int | None:
        try:
            return self.path_of(sha256).stat().st_size
        except FileNotFoundError:
            return None

    async def put(self, sha256: str, source: Path) -> None:
        await asyncio.to_thread(self._put, sha256, source)

    def _put(self, sha256: str, source: Path) -> None:
        final = self.path_of(sha256)
        if final.is_file():
            return
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            temporary = final.parent / f".{sha256}.{uuid.uuid4().hex}.tmp"
            try:
                shutil.copyfile(source, temporary)
                with open(temporary, "rb+") as handle:
                    os.fsync(handle.fileno())
                os.chmod(temporary, 0o444)
                os.replace(temporary, final)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    temporary.unlink()
            directory = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise StoreError(f"could not store blob {sha256} under {self.root}: {exc}") from exc

    async def read(self, sha256: str, offset: int, length: int) -> bytes:
        return await asyncio.to_thread(self._read, sha256, offset, length)

    def _read(self, sha256: str, offset: int, length: int) -> bytes:
        try:
            with open(self.path_of(sha256), "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except FileNotFoundError as exc:
            raise StoreError(f"blob {sha256} is not in the store") from exc
        except OSError as exc:
            raise StoreError(f"could not read blob {sha256} under {self.root}: {exc}") from exc


class S3Store:
    def __init__(self, client: BaseClient, bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    def _head(self, sha256: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            head: dict[str, Any] = self._client.head_object(Bucket=self.bucket, Key=blob_key(sha256))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StoreError(f"could not look for blob {sha256} in bucket {self.bucket}: {exc}") from exc
        return head

    async def has(self, sha256: str) -> bool:
        return await asyncio.to_thread(self._head, sha256) is not None

    async def size(self, sha256: str) -> int | None:
        head = await asyncio.to_thread(self._head, sha256)
        return None if head is None else int(head["ContentLength"])

    async def put(self, sha256: str, source: Path) -> None:
        await asyncio.to_thread(self._put, sha256, source)

    def _put(self, sha256: str, source: Path) -> None:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        if self._head(sha256) is not None:
            return
        try:
            self._client.upload_file(str(source), self.bucket, blob_key(sha256))
        except (Boto3Error, BotoCoreError, ClientError) as exc:
            raise StoreError(f"could not store blob {sha256} in bucket {self.bucket}: {exc}") from exc

    async def read(self, sha256: str, offset: int, length: int) -> bytes:
        return await asyncio.to_thread(self._read, sha256, offset, length)

    def _read(self, sha256: str, offset: int, length: int) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        if length <= 0:
            return b""
        try:
            answer = self._client.get_object(
                Bucket=self.bucket, Key=blob_key(sha256), Range=f"bytes={offset}-{offset + length - 1}"
            )
            data: bytes = answer["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "InvalidRange":
                return b""  # at or past its end
            raise StoreError(f"could not read blob {sha256} from bucket {self.bucket}: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"could not read blob {sha256} from bucket {self.bucket}: {exc}") from exc
        return data


def s3_client(settings: ArtifactSettings) -> BaseClient:
    """A boto3 S3 client from the settings; what they leave unset, boto3's own chain
    (its environment variables, config files, an instance role) decides."""
    import boto3

    secret = None
    if settings.s3_secret_access_key_file is not None:
        secret = settings.s3_secret_access_key_file.read_text().strip()
    client: BaseClient = boto3.session.Session().client(
        "s3",
        endpoint_url=settings.s3_endpoint,
        region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key_id if secret is not None else None,
        aws_secret_access_key=secret,
    )
    return client


def open_store(settings: ArtifactSettings, home: Path) -> ArtifactStore:
    """The store the settings name."""
    if settings.store == "s3":
        return S3Store(s3_client(settings), settings.s3_bucket)
    return DirectoryStore(settings.directory(home))
