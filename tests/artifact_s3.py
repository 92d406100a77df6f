"""A real S3 API for tests: moto's server (``moto_server``) as a subprocess on a free
loopback port, with one bucket, and the settings that point Corral's store at it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from corral.local.ports import free_port
from shared.artifacts.settings import ArtifactSettings
from shared.artifacts.store import s3_client

BUCKET = "corral-test-artifacts"


@contextmanager
def moto_s3(directory: Path) -> Iterator[ArtifactSettings]:
    """The server, up until the block ends, and the ``s3`` settings of a store on it."""
    port = free_port()
    log = (directory / "moto.log").open("wb")
    server = subprocess.Popen(  # moto's own server script, from this environment
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError(
                        f"moto_server did not start: {(directory / 'moto.log').read_text()}"
                    ) from None
                time.sleep(0.1)
        secret = directory / "s3-secret"
        secret.write_text("testing-secret\n")
        secret.chmod(0o600)
        settings = ArtifactSettings(
            store="s3",
            s3_endpoint=endpoint,
            s3_bucket=BUCKET,
            s3_region="us-east-1",
            s3_access_key_id="testing",
            s3_secret_access_key_file=secret,
        )
        s3_client(settings).create_bucket(Bucket=BUCKET)
        yield settings
    finally:
        server.terminate()
        server.wait(10)
        log.close()
