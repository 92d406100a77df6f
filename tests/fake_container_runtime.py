#!/usr/bin/env python3
"""A FAKE container runtime: stands in for podman, docker and apptainer, none of which can run
containers in this machine's sandbox (docs/testing.md says what was tried).

Run as a runtime would be (``CORRAL_CONTAINER_RUNTIME_COMMAND`` names this file), it appends
one JSON line to ``CALLS`` in its working directory — the task's, which the task may write
to wherever it runs, sandboxed or not — with its argv and environment, then runs the image's
command line (its last three arguments, ``sh -c COMMAND``) on the host, so that the task
still does what it says. It checks nothing a real runtime checks: the tests read the argv
it was given and compare it with what each runtime documents. Standard library only: it
runs as the task, with the task's ``PATH``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

CALLS = ".fake-runtime-calls.jsonl"
EXECUTABLE = Path(__file__).resolve()


def calls(directory: Path) -> list[dict[str, Any]]:
    """What the fake was called with in ``directory``, in order: each call's argv and env."""
    path = directory / CALLS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def main() -> None:
    with open(CALLS, "a") as out:
        out.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}) + "\n")
    if sys.argv[-3:-1] != ["sh", "-c"]:
        sys.exit(f"fake runtime: the image's command line is not `sh -c COMMAND`: {sys.argv[1:]}")
    os.execvp("sh", ["sh", "-c", sys.argv[-1]])  # noqa: S606 - the shell is what the image would run


if __name__ == "__main__":
    main()
