"""What each VC and user holds during a cycle: guaranteed GPUs per (VC, type), GPUs per
(VC, user), borrowed GPUs per VC. Starts from the running jobs; grows with each placement."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Tally:
    guaranteed: dict[tuple[str, str], int] = field(default_factory=dict)  # (vc, type) -> GPUs
    per_user: dict[tuple[str, str], int] = field(default_factory=dict)  # (vc, user) -> GPUs
    borrowed: dict[str, int] = field(default_factory=dict)  # vc -> GPUs

    def add(self, vc: str, user: str, gpu_type: str, gpus: int, borrowed: bool) -> None:
        if borrowed:
            self.borrowed[vc] = self.borrowed.get(vc, 0) + gpus
        else:
            self.guaranteed[(vc, gpu_type)] = self.guaranteed.get((vc, gpu_type), 0) + gpus
        self.per_user[(vc, user)] = self.per_user.get((vc, user), 0) + gpus
