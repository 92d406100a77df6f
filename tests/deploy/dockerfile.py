"""A small reader of deploy/Dockerfile's stages, for the Dockerfile and Tiltfile tests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from tests.deploy.render import DEPLOY

DOCKERFILE = DEPLOY / "Dockerfile"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [arguments for name, arguments in self.instructions if name == instruction]


def stages(text: str | None = None) -> list[Stage]:
    """Instructions per stage, continuation lines joined and comments dropped."""
    source = DOCKERFILE.read_text() if text is None else text
    logical = re.sub(
        r"\\\n", " ", "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    )
    found: list[Stage] = []
    for line in logical.splitlines():
        if not line.strip():
            continue
        instruction, _, arguments = line.strip().partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            parts = arguments.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(found))
            found.append(Stage(name, parts[0]))
        else:
            found[-1].instructions.append((instruction, arguments.strip()))
    return found


def stage(name: str) -> Stage:
    (found,) = [s for s in stages() if s.name == name]
    return found


def lineage(target: Stage) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    by_name = {s.name: s for s in stages()}
    chain = [target]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    return chain


def effective(target: Stage, instruction: str) -> str | None:
    """The last USER / ENTRYPOINT / WORKDIR... in force in ``target``."""
    for current in lineage(target):
        values = current.all(instruction)
        if values:
            return values[-1]
    return None


def copied(target: Stage) -> set[str]:
    """The sources of the stage's COPY instructions (flags and destination left out)."""
    sources: set[str] = set()
    for arguments in target.all("COPY"):
        words = [w for w in arguments.split() if not w.startswith("--")]
        sources |= set(words[:-1])
    return sources


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list), f"not exec form: {arguments}"
    return [str(v) for v in value]
