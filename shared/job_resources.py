"""What one instance of a task asks for: GPUs (whole, or a fraction of one), CPUs, memory,
a GPU type and where its cores sit. Part of the job spec (``shared/jobs.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from shared.request_types import Integer

MAX_GPUS_PER_INSTANCE = 64


def _a_number_of_gpus(value: object) -> object:
    """A number, never ``true`` or ``"2"``: checked before the union of a whole number and a
    fraction, so that a wrong type is one error on ``gpus`` rather than one per member."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError(
            "gpu_count_type",
            "Input should be a number of GPUs: a whole number, or a fraction of one such as 0.5",
        )
    return value


class Resources(BaseModel):
    """Per-instance resources."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    gpus: Annotated[Integer | float, BeforeValidator(_a_number_of_gpus)] = Field(
        default=0,
        ge=0,
        le=MAX_GPUS_PER_INSTANCE,
        description=(
            "GPUs per instance: whole GPUs, or a fraction of one GPU (e.g. 0.5, to the nearest "
            "0.001), placed on a node pool that shares its GPUs"
        ),
    )
    gpu_memory_mb: Integer | None = Field(
        default=None,
        gt=0,
        le=16 * 1024 * 1024,
        description=(
            "with a fraction of a GPU: the GPU memory the instance may use (MiB), enforced where the "
            "node pool's sharing mode can (hami) and checked by the node agent everywhere; "
            "default: its fraction of the GPU's memory"
        ),
    )
    cpus: float = Field(default=1.0, gt=0, le=1024, description="CPU cores per instance")
    memory_mb: Integer = Field(default=1024, gt=0, le=16 * 1024 * 1024, description="Memory per instance")
    gpu_type: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$",
        description="GPU type, e.g. H100 (as `corral gpus` shows it); any type when omitted",
    )
    numa: Literal["preferred", "required"] = Field(
        default="preferred",
        description=(
            "CPU placement against the GPUs' NUMA node. preferred (default): cores on the GPUs' "
            "node when free, else free cores elsewhere, because a job that starts now unaligned "
            "usually finishes before one that waits for alignment; required: never cores of "
            "another node (shares the node's cores when none are free)"
        ),
    )

    @field_validator("gpus")
    @classmethod
    def _whole_or_a_fraction(cls, gpus: int | float) -> int | float:
        if isinstance(gpus, int) or gpus.is_integer():
            return int(gpus)
        milli = gpus * 1000
        if abs(milli - round(milli)) > 1e-6 or not 1 <= round(milli) <= 999:
            raise ValueError(
                f"a task asks for whole GPUs or a fraction of one (0.001 to 0.999), not {gpus}; "
                "a task that needs more than one GPU asks for whole GPUs"
            )
        return round(milli) / 1000  # as it is counted: 0.1 * 3 is stored as 0.3

    @model_validator(mode="after")
    def _gpu_memory_with_a_fraction(self) -> Resources:
        if self.gpu_memory_mb is not None and not self.gpu_milli:
            raise ValueError(
                "gpu_memory_mb is for a fraction of a GPU (gpus below 1); a task with whole GPUs has "
                "all their memory"
            )
        return self

    @property
    def gpu_devices(self) -> int:
        """The GPUs the task sees: its whole GPUs, or the one it holds a share of."""
        return self.gpus if isinstance(self.gpus, int) else 1

    @property
    def gpu_milli(self) -> int:
        """The share of one GPU in thousandths when the task asks for a fraction; 0 for whole GPUs."""
        return 0 if isinstance(self.gpus, int) else round(self.gpus * 1000)
