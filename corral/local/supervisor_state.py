"""``run/supervisor.json``: what the supervisor is keeping alive, for operators.

Rewritten whole (a temporary file renamed over it) whenever a process exits or comes
back, so a reader never sees half of it. The API serves it in its services view
(``CORRAL_API_SUPERVISOR_STATE_FILE``), where ``corral instances`` shows it: the one place
a server's restarts are visible, since a server has no liveness row of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path


def write_state(path: Path, processes: Sequence[dict[str, object]]) -> None:
    document = {"updated_at": datetime.now(UTC).isoformat(), "processes": list(processes)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=".supervisor-")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
