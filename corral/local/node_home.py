"""A node's home after ``corral join`` (corral/commands/membership.py writes it): its
secrets in 0600 files under ``$CORRAL_HOME/credentials``, its settings (where the bus and
the database are, who this node is, which files hold its secrets) in
``$CORRAL_HOME/node.env``. ``corral up`` in that home reads ``node.env`` first and runs
only the node's agent and exporter: nothing else to configure. A variable set in the
environment wins over the file.
"""

from __future__ import annotations

import os
from pathlib import Path

NODE_ENV = "node.env"


def read_node_env(home: Path) -> dict[str, str]:
    """The settings in ``home``'s ``node.env``, if it has one."""
    path = home / NODE_ENV
    if not path.exists():
        return {}
    lines = (line.strip() for line in path.read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#") and "=" in line)


def apply_node_env() -> None:
    """Put this process's home's ``node.env`` beneath its environment (``corral up``)."""
    for key, value in read_node_env(Path(os.environ.get("CORRAL_HOME", ".corral"))).items():
        os.environ.setdefault(key, value)
