#!/usr/bin/env python3
"""Do what a newcomer does on a fresh machine, and time each step.

    python3 .ci/fresh_clone.py [--ref HEAD] [--skip-test] [--keep]

1. a clean clone of this repository (``--ref``, committed work only) into a directory
   whose parent is private (mode 0700, as ``mktemp -d`` or ``/root`` make) and whose
   path holds a space;
2. ``make up`` until the API is ready and the node has registered (its first part is the
   install: the virtualenv and every pinned dependency);
3. the README tour's first job: submitted with the admin token, SUCCEEDED, its log read;
4. Ctrl-C, as a terminal sends it: the whole stack stops;
5. ``make test``.

Standard library only: it runs before any virtualenv exists. Each step prints a line as
it ends; the last line is one JSON object with every step's seconds. Exits non-zero at the
first step that fails, after saying which and why. Ports are chosen free, so a stack
already running on this machine is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIRST_JOB = {
    "name": "hello",
    "tasks": [{"name": "main", "instances": 1, "command": "echo hello", "resources": {"gpus": 1}}],
}


class StepFailed(Exception):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(url: str, token: str | None = None, body: Mapping[str, object] | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data)  # noqa: S310 - http://127.0.0.1, our own API
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - as above
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


class Newcomer:
    def __init__(self, ref: str, keep: bool) -> None:
        self.ref = ref
        self.keep = keep
        self.parent = Path(tempfile.mkdtemp(prefix="corral-fresh-"))  # mode 0700
        self.checkout = self.parent / "corral checkout"
        self.api = f"http://127.0.0.1:{free_port()}"
        self.env = {
            **os.environ,
            "CORRAL_PORT": self.api.rsplit(":", 1)[1],
            "CORRAL_PG_PORT": str(free_port()),
            "CORRAL_NATS_PORT": str(free_port()),
        }
        self.up: subprocess.Popen[bytes] | None = None
        self.up_log = self.parent / "make-up.log"
        self.times: dict[str, float] = {}

    def step(self, name: str, started: float) -> None:
        self.times[name] = round(time.monotonic() - started, 1)
        print(f"fresh-clone: {name}: {self.times[name]:.1f} s", flush=True)

    def clone(self) -> None:
        started = time.monotonic()
        assert self.parent.stat().st_mode & 0o777 == 0o700
        subprocess.run(
            ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(self.checkout)], check=True
        )
        subprocess.run(["git", "-C", str(self.checkout), "checkout", "--quiet", self.ref], check=True)
        self.step("clone", started)

    def make_up(self, timeout_s: float = 900) -> None:
        started = time.monotonic()
        with self.up_log.open("wb") as log:
            self.up = subprocess.Popen(
                ["make", "up"],
                cwd=self.checkout,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        installed = self.checkout / ".venv" / ".installed"
        token_file = self.checkout / ".corral" / "admin-token"
        install_done = False
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if self.up.poll() is not None:
                raise StepFailed(f"make up exited with {self.up.returncode}:\n{self.tail()}")
            if not install_done and installed.exists():
                install_done = True
                self.step("make up: install", started)
                since_install = time.monotonic()
            if install_done and token_file.exists() and self.ready(token_file.read_text().strip()):
                self.step("make up: start", since_install)
                return
            time.sleep(0.5)
        raise StepFailed(f"make up was not ready within {timeout_s:.0f} s:\n{self.tail()}")

    def ready(self, token: str) -> bool:
        status, _ = call(f"{self.api}/readyz")
        if status != 200:
            return False
        status, body = call(f"{self.api}/api/v1/nodes", token)
        return status == 200 and any(node.get("state") == "READY" for node in json.loads(body)["items"])

    def first_job(self, timeout_s: float = 60) -> None:
        started = time.monotonic()
        token = (self.checkout / ".corral" / "admin-token").read_text().strip()
        status, body = call(f"{self.api}/api/v1/jobs", token, FIRST_JOB)
        if status not in (200, 201, 202):
            raise StepFailed(f"submitting the tour's job answered {status}: {body}")
        job_id = json.loads(body)["id"]
        deadline = started + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = json.loads(call(f"{self.api}/api/v1/jobs/{job_id}", token)[1])["state"]
            if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.1)
        logs = call(f"{self.api}/api/v1/jobs/{job_id}/logs", token)[1]
        if state != "SUCCEEDED" or logs != "hello\n":
            raise StepFailed(f"the tour's job ended {state!r} with logs {logs!r}")
        self.step("first job", started)

    def ctrl_c(self, timeout_s: float = 60) -> None:
        started = time.monotonic()
        assert self.up is not None
        os.killpg(self.up.pid, signal.SIGINT)  # the whole foreground group, as a terminal does
        try:
            self.up.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise StepFailed(
                f"make up did not stop within {timeout_s:.0f} s of Ctrl-C:\n{self.tail()}"
            ) from None
        if "Corral stopped." not in self.up_log.read_text(errors="replace"):
            raise StepFailed(f"make up did not say it stopped:\n{self.tail()}")
        self.step("ctrl-c", started)

    def make_test(self) -> None:
        started = time.monotonic()
        log = self.parent / "make-test.log"
        with log.open("wb") as out:
            done = subprocess.run(["make", "test"], cwd=self.checkout, env=self.env, stdout=out, stderr=out)
        output = log.read_text(errors="replace").splitlines()
        summary = [line for line in output if " passed" in line]
        print(f"fresh-clone: make test: {summary[-1] if summary else '(no summary)'}", flush=True)
        if done.returncode != 0:
            kept = Path(tempfile.gettempdir()) / f"corral-fresh-{self.ref[:12]}-make-test.log"
            shutil.copyfile(log, kept)  # the clone goes; its failures stay readable
            failures = [line for line in output if line.startswith(("FAILED ", "ERROR "))]
            raise StepFailed(
                f"make test exited with {done.returncode}; its output is in {kept}\n" + "\n".join(failures)
            )
        self.step("make test", started)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.up_log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no output)"

    def clean_up(self) -> None:
        if self.up is not None and self.up.poll() is None:
            os.killpg(self.up.pid, signal.SIGINT)
            try:
                self.up.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.up.pid, signal.SIGKILL)
        if self.keep:
            print(f"fresh-clone: kept {self.parent}", flush=True)
            return
        data = self.checkout / ".corral" / "postgres" / "data"
        if data.is_symlink():  # the database's files, kept where its account could reach them
            shutil.rmtree(data.resolve().parent, ignore_errors=True)
        shutil.rmtree(self.parent, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ref", default="HEAD", help="what to clone (committed work only; default HEAD)")
    parser.add_argument("--skip-test", action="store_true", help="stop after Ctrl-C, without make test")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its logs")
    args = parser.parse_args()
    newcomer = Newcomer(
        subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", args.ref], check=True, capture_output=True, text=True
        ).stdout.strip(),
        args.keep,
    )
    print(f"fresh-clone: {newcomer.ref[:12]} into {newcomer.checkout}", flush=True)
    failed = ""
    try:
        newcomer.clone()
        newcomer.make_up()
        newcomer.first_job()
        newcomer.ctrl_c()
        if not args.skip_test:
            newcomer.make_test()
    except (StepFailed, subprocess.CalledProcessError) as exc:
        failed = str(exc)
        print(f"fresh-clone: FAILED: {failed}", file=sys.stderr, flush=True)
    finally:
        newcomer.clean_up()
    print(json.dumps({"ref": newcomer.ref, "ok": not failed, "seconds": newcomer.times}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
