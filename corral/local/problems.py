"""Why ``make up`` could not start, said the way a person can act on it.

Every failure of the local stack's start names the step that failed, the cause, and
what to do, in one or two lines on the terminal (``corral up`` prints it and exits 1),
never only a traceback.
"""

from __future__ import annotations


class StartupProblem(Exception):
    """A step of ``make up`` failed for a reason the user can fix."""

    def __init__(self, step: str, cause: str, fix: str) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.cause = cause
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.step} failed: {self.cause}\n  fix: {self.fix}"
