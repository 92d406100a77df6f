"""SSH into and between a job's tasks (``ssh``): part of the job spec (``shared/jobs.py``).

What OpenPAI's ``ssh`` runtime plugin gives a job, for any job (MPI jobs have their own
wiring, ``shared/mpi_spec.py``):

- ``between_tasks``: every task runs an unprivileged ``sshd`` beside its command, on a
  port of its own (the ``ssh`` port label), and holds the job's key and an ssh config
  that names every task by ``ROLE-INDEX``: ``ssh worker-1 hostname`` works from any
  task of the job (OpenPAI's ``jobssh``);
- ``barrier``: a task's command starts only once every task's sshd answers, or fails
  after ``barrier_timeout_s`` (OpenPAI's ``sshbarrier``);
- ``authorized_keys`` and ``user_keys``: public keys that may log in to every task, through
  ``corral ssh JOB`` over the API's gateway (nodes open no inbound port): keys given here,
  or keys the submitter keeps in Corral, named (OpenPAI's ``userssh``).

Every task of a job with ``ssh`` runs the sshd (``corral ssh`` reaches it even without
``between_tasks``), so every role gets the ``ssh`` port label: ``fill_ssh_defaults``, run on
the submitted document before it is validated, so the stored spec shows it. Without
``between_tasks`` a task holds no key of the job and no ssh config: only the keys of
``authorized_keys`` and ``user_keys`` log in to it; the barrier needs ``between_tasks``
(the wait logs in to every task with the job's key).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SSH_PORT_LABEL = "ssh"
MAX_AUTHORIZED_KEYS = 16
# One OpenSSH public key line: type, base64 body, optional comment. Options before the
# type (``command="..."``) are not taken: a key here logs in as the task, nothing more.
PUBLIC_KEY_RE = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
    r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{16,16384}={0,3}( [^\x00-\x1f]{0,200})?$"
)
KEY_NAME_PATTERN = r"^[a-z0-9]([a-z0-9_.-]{0,62}[a-z0-9])?$"


def check_public_key(value: str) -> str:
    """One OpenSSH public key line, stripped; a ValueError that says what is wrong."""
    line = value.strip()
    if "\n" in line or not PUBLIC_KEY_RE.fullmatch(line):
        raise ValueError(
            "not an OpenSSH public key: give one line such as 'ssh-ed25519 AAAA... you@laptop' "
            "(the contents of ~/.ssh/id_ed25519.pub), without options before the key type"
        )
    return line


class SshSettings(BaseModel):
    """How the job's tasks are reached over ssh (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    between_tasks: bool = Field(
        default=True,
        description="every task runs sshd and can `ssh ROLE-INDEX` to any other task of the job",
    )
    barrier: bool = Field(
        default=False, description="start each task's command only once every task's sshd answers"
    )
    barrier_timeout_s: float = Field(
        default=120.0, ge=1, le=3600, description="how long the barrier waits before the task fails"
    )
    authorized_keys: list[str] = Field(
        default_factory=list,
        max_length=MAX_AUTHORIZED_KEYS,
        description="OpenSSH public keys that may log in to every task (`corral ssh JOB`)",
    )
    user_keys: list[Annotated[str, Field(pattern=KEY_NAME_PATTERN)]] = Field(
        default_factory=list,
        max_length=MAX_AUTHORIZED_KEYS,
        description="names of public keys the submitter keeps in Corral (PUT /api/v1/users/me/ssh-keys/NAME)",
    )

    @field_validator("authorized_keys")
    @classmethod
    def _public_keys(cls, value: list[str]) -> list[str]:
        return [check_public_key(key) for key in value]

    @model_validator(mode="after")
    def _barrier_logs_in(self) -> SshSettings:
        if self.barrier and not self.between_tasks:
            raise ValueError(
                "ssh.barrier waits by logging in to every task with the job's key: "
                "set ssh.between_tasks: true, or remove ssh.barrier"
            )
        return self


def fill_ssh_defaults(data: Any) -> Any:
    """The submitted document with every role given the ``ssh`` port label when the job
    asks for ``ssh`` (module docstring); any other document as it is (validation then
    says what is wrong with it). A role's own count for the label is kept."""
    if not isinstance(data, dict) or not isinstance(data.get("ssh"), dict):
        return data
    tasks = data.get("tasks")
    if not isinstance(tasks, list):
        return data
    filled = []
    for task in tasks:
        if isinstance(task, dict):
            ports = task.get("ports")
            if ports is None:
                task = {**task, "ports": {SSH_PORT_LABEL: 1}}
            elif isinstance(ports, dict) and SSH_PORT_LABEL not in ports:
                task = {**task, "ports": {**ports, SSH_PORT_LABEL: 1}}
        filled.append(task)
    return {**data, "tasks": filled}
