"""What the driver has already reported per attempt, so each change is reported once.

The watch is level-based underneath: after a reconnect or a 410 the driver lists the
pods again and feeds every one through here, and only differences from what was already
reported come out. A pod that vanished while nobody watched is found by comparing the
list with what is remembered, and reported as deleted from its last known state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.launcher.drivers import TaskObserved
from services.launcher.kubernetes.status import Pod, PodState


@dataclass
class _Seen:
    pod: Pod = field(default_factory=dict)
    running: bool = False
    ended: bool = False
    readiness: tuple[bool, str] | None = None


class Tracker:
    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def update(self, state: PodState, pod: Pod) -> list[TaskObserved]:
        """The observations ``state`` adds to what was reported for its attempt."""
        seen = self._seen.setdefault(state.attempt_id, _Seen())
        seen.pod = pod
        if seen.ended:
            return []
        out: list[TaskObserved] = []
        if state.ended is not None:
            ran = state.ended.exit_code is not None and state.ended.platform != "start_failed"
            if ran and not seen.running:  # it ran between two looks: say so before its end
                out.append(TaskObserved(state.attempt_id, running=True))
            out.append(TaskObserved(state.attempt_id, running=False, ended=state.ended))
            seen.running, seen.ended = False, True
        elif state.running and not seen.running:
            out.append(TaskObserved(state.attempt_id, running=True))
            seen.running = True
        if state.running and state.readiness is not None and state.readiness != seen.readiness:
            out.append(TaskObserved(state.attempt_id, running=True, readiness=state.readiness))
            seen.readiness = state.readiness
        return out

    def ended(self, attempt_id: str) -> bool:
        seen = self._seen.get(attempt_id)
        return seen is not None and seen.ended

    def forget(self, attempt_id: str) -> None:
        self._seen.pop(attempt_id, None)

    def missing(self, present: set[str]) -> dict[str, Pod]:
        """Remembered attempts whose pods are not in ``present``, with their last pod."""
        return {attempt: seen.pod for attempt, seen in self._seen.items() if attempt not in present}
