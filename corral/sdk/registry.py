"""Models and artifacts: the SDK's calls, mixed into ``Client`` and ``AsyncClient``.

    with Client() as corral:
        version = corral.register_model("mnist", f"{job.id}:model")   # mnist@1
        corral.submit({..., "inputs": [{"model": "mnist@latest"}]})   # pinned at submit
        print(corral.get_model_version("mnist").source_inputs)         # the lineage

Each call is built here once, as ``operations.py`` builds the others, and run by the
client's own ``_run`` (retries, errors): the two mixins differ only in awaiting it.
Registering a version is not retried after a dropped connection (it may have happened:
a second try would add another version).
"""

from __future__ import annotations

from typing import TypeVar

from corral.sdk.models.registry import (
    Artifact,
    ArtifactDetail,
    ModelVersionDetail,
    RegisteredModelDetail,
    RegisteredModelPage,
)
from corral.sdk.operations import Call, _get, _items, _one, _seg

T = TypeVar("T")


def list_models(limit: int, cursor: str | None) -> Call[RegisteredModelPage]:
    return _get("/api/v1/models", _one(RegisteredModelPage), limit=limit, cursor=cursor)


def get_model(name: str) -> Call[RegisteredModelDetail]:
    return _get(f"/api/v1/models/{_seg(name)}", _one(RegisteredModelDetail))


def get_model_version(name: str, version: int | str) -> Call[ModelVersionDetail]:
    return _get(f"/api/v1/models/{_seg(name)}/versions/{_seg(version)}", _one(ModelVersionDetail))


def register_model(
    name: str, source: str, parent: int | None, description: str, group: str | None
) -> Call[ModelVersionDetail]:
    body = {"from": source, "parent": parent, "description": description, "group": group}
    return Call("POST", f"/api/v1/models/{_seg(name)}/versions", _one(ModelVersionDetail), body=body)


def job_artifacts(job_id: str) -> Call[list[Artifact]]:
    return _get(f"/api/v1/jobs/{_seg(job_id)}/artifacts", _items(Artifact))


def get_artifact(artifact_id: str) -> Call[ArtifactDetail]:
    return _get(f"/api/v1/artifacts/{_seg(artifact_id)}", _one(ArtifactDetail))


class RegistryCalls:
    """The models and artifacts methods of ``Client``."""

    def _run(self, call: Call[T]) -> T:
        raise NotImplementedError  # the client's

    def list_models(self, limit: int = 100, cursor: str | None = None) -> RegisteredModelPage:
        """One page of the models you may read (yours, your groups'), by name."""
        return self._run(list_models(limit, cursor))

    def get_model(self, name: str) -> RegisteredModelDetail:
        """A model with its versions, newest first."""
        return self._run(get_model(name))

    def get_model_version(self, name: str, version: int | str = "latest") -> ModelVersionDetail:
        """One version (default: the newest) with its lineage (``source_inputs``)."""
        return self._run(get_model_version(name, version))

    def register_model(
        self,
        name: str,
        source: str,
        *,
        parent: int | None = None,
        description: str = "",
        group: str | None = None,
    ) -> ModelVersionDetail:
        """Register ``source`` (``JOB:OUTPUT`` of a succeeded job) as the model's next
        version; the first register makes the model, shared with ``group`` if given."""
        return self._run(register_model(name, source, parent, description, group))

    def job_artifacts(self, job_id: str) -> list[Artifact]:
        """The outputs a job kept (empty until it succeeds); without manifests."""
        return self._run(job_artifacts(job_id))

    def get_artifact(self, artifact_id: str) -> ArtifactDetail:
        """One artifact with its manifest: every file's path, size and sha256."""
        return self._run(get_artifact(artifact_id))


class AsyncRegistryCalls:
    """The models and artifacts methods of ``AsyncClient``."""

    async def _run(self, call: Call[T]) -> T:
        raise NotImplementedError  # the client's

    async def list_models(self, limit: int = 100, cursor: str | None = None) -> RegisteredModelPage:
        return await self._run(list_models(limit, cursor))

    async def get_model(self, name: str) -> RegisteredModelDetail:
        return await self._run(get_model(name))

    async def get_model_version(self, name: str, version: int | str = "latest") -> ModelVersionDetail:
        return await self._run(get_model_version(name, version))

    async def register_model(
        self,
        name: str,
        source: str,
        *,
        parent: int | None = None,
        description: str = "",
        group: str | None = None,
    ) -> ModelVersionDetail:
        return await self._run(register_model(name, source, parent, description, group))

    async def job_artifacts(self, job_id: str) -> list[Artifact]:
        return await self._run(job_artifacts(job_id))

    async def get_artifact(self, artifact_id: str) -> ArtifactDetail:
        return await self._run(get_artifact(artifact_id))
