"""What each VC and user holds during a cycle: guaranteed GPUs per (VC, type), GPUs per
(VC, user), borrowed GPUs per VC, shares of GPUs counted as the fractions they are. Starts
from the running jobs; grows with each placement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from services.scheduler.model import RunningJob


@dataclass
class Tally:
    guaranteed: dict[tuple[str, str], float] = field(default_factory=dict)  # (vc, type) -> GPUs
    per_user: dict[tuple[str, str], float] = field(default_factory=dict)  # (vc, user) -> GPUs
    borrowed: dict[str, float] = field(default_factory=dict)  # vc -> GPUs

    def add(self, vc: str, user: str, gpu_type: str, gpus: float, borrowed: bool) -> None:
        # Rounded to thousandths (what shares are counted in): sums stay exact.
        if borrowed:
            self.borrowed[vc] = round(self.borrowed.get(vc, 0) + gpus, 3)
        else:
            self.guaranteed[(vc, gpu_type)] = round(self.guaranteed.get((vc, gpu_type), 0) + gpus, 3)
        self.per_user[(vc, user)] = round(self.per_user.get((vc, user), 0) + gpus, 3)

    @classmethod
    def of(cls, running: Sequence[RunningJob]) -> Tally:
        """What the running jobs hold (``add`` for each, inlined: thousands every cycle)."""
        guaranteed: dict[tuple[str, str], float] = {}
        per_user: dict[tuple[str, str], float] = {}
        borrowed: dict[str, float] = {}
        for job in running:
            vc, gpus = job.vc, job.gpus
            if job.borrowed:
                borrowed[vc] = borrowed.get(vc, 0) + gpus
            else:
                key = (vc, job.gpu_type)
                guaranteed[key] = guaranteed.get(key, 0) + gpus
            user = (vc, job.user)
            per_user[user] = per_user.get(user, 0) + gpus
        tally = cls(guaranteed, per_user, borrowed)
        return tally.rounded() if any(job.shares for job in running) else tally

    def rounded(self) -> Tally:
        """The sums to thousandths, what shares are counted in: no float dust."""
        return Tally(
            {k: round(v, 3) for k, v in self.guaranteed.items()},
            {k: round(v, 3) for k, v in self.per_user.items()},
            {k: round(v, 3) for k, v in self.borrowed.items()},
        )
