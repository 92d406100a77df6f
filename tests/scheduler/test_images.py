"""Jobs whose tasks name an image go only to nodes that run images (a container runtime, or
Kubernetes' pods); with ``allow_host_execution`` any node will do; where no ready node runs
images, such a job waits and its reason says what to set."""

from __future__ import annotations

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.model import NodeCapacity, PendingJob, TaskDemand
from services.scheduler.planner import plan
from services.scheduler.snapshot import PendingJobs, load_snapshot
from shared.db.pool import Database
from shared.jobs import JobSpec


def _job(
    job_id: str, gpus: int = 1, *, image: bool = True, instances: int = 1, cpus: float = 0.0
) -> PendingJob:
    return PendingJob(job_id, 1, 0, (TaskDemand("w", instances, gpus, cpus),), needs_image_runtime=image)


def _node(node_id: str, gpus: int = 2, *, images: bool, shares: dict[int, int] | None = None) -> NodeCapacity:
    shares = dict(shares or {})
    free = [g for g in range(gpus) if g not in shares]
    return NodeCapacity(
        node_id,
        free,
        total_gpus=gpus,
        gpu_type="H100",
        free_cpus=16.0,
        sharing=bool(shares),
        shares=shares,
        runs_images=images,
    )


def _placed(result: object) -> dict[str, list[str]]:
    return {d.job.job_id: [p.node_id for p in d.placements] for d in result.decisions}  # type: ignore[attr-defined]


def test_an_image_job_goes_only_to_a_node_that_runs_images() -> None:
    # Best fit alone would take "host" (fewest free GPUs that hold the job).
    nodes = [_node("host", 1, images=False), _node("runtime", 4, images=True)]
    result = plan([_job("img", 1), _job("plain", 1, image=False)], nodes)
    assert _placed(result) == {"img": ["runtime"], "plain": ["host"]}


def test_gpu_less_instances_and_gangs_of_an_image_job_stay_on_nodes_that_run_images() -> None:
    nodes = [_node("host", 8, images=False), _node("r1", 2, images=True), _node("r2", 2, images=True)]
    result = plan([_job("cpu", 0, cpus=2.0), _job("gang", 1, instances=4)], nodes)
    placed = _placed(result)
    assert placed["cpu"] in (["r1"], ["r2"])
    assert sorted(placed["gang"]) == ["r1", "r1", "r2", "r2"]


def test_nodes_hidden_for_an_image_job_are_whole_again_for_the_next_job() -> None:
    nodes = [_node("host", 2, images=False, shares={0: 300}), _node("runtime", 1, images=True)]
    result = plan([_job("too-big", 2)], nodes)
    assert result.decisions == []
    [waiting] = result.waiting
    assert (waiting.job_id, waiting.reason) == ("too-big", "InsufficientGPUs")
    assert waiting.detail == (
        "its tasks run in an image; the ready nodes that run container images (CORRAL_CONTAINER_RUNTIME)"
        " have no room for it now (it needs 2 GPUs)"
    )
    host = nodes[0]
    assert (host.free_gpus, host.shares, host.free_cpus) == ([1], {0: 300}, 16.0)
    [decision] = plan([_job("plain", 1, image=False)], [host]).decisions
    assert [(p.node_id, p.gpu_indices) for p in decision.placements] == [("host", (1,))]


def test_an_image_job_waits_where_no_ready_node_runs_images_and_says_what_to_set() -> None:
    result = plan([_job("img", 1)], [_node("host", 8, images=False)])
    assert result.decisions == []
    [waiting] = result.waiting
    assert waiting.reason == "GangDoesNotFit"
    assert waiting.detail == (
        "its tasks run in an image, and no ready node runs container images (CORRAL_CONTAINER_RUNTIME);"
        " a node runs them once its operator sets CORRAL_CONTAINER_RUNTIME (podman, docker or apptainer),"
        " or is run by Kubernetes. To run the job on a node's host instead, outside its image, submit it"
        " with allow_host_execution: true"
    )


def test_where_every_node_runs_images_an_image_job_is_placed_as_any_other() -> None:
    nodes = [_node("a", 1, images=True), _node("b", 4, images=True)]
    assert _placed(plan([_job("img", 1)], nodes)) == {"img": ["a"]}


async def _submit(repo: Submitter, **fields: object) -> str:
    task = {"name": "main", "command": "x", "resources": {"gpus": 1}, **fields.pop("task", {})}  # type: ignore[dict-item]
    spec = JobSpec.model_validate({"name": "t", "tasks": [task], **fields})
    return str((await repo.submit(spec, "alice", None)).job.id)


async def test_the_cycle_reads_which_jobs_need_a_runtime_and_which_nodes_run_images(db: Database) -> None:
    repo = Submitter(JobRepository(db))
    image = await _submit(repo, task={"image": "python:3.12"})
    allowed = await _submit(repo, task={"image": "python:3.12"}, allow_host_execution=True)
    plain = await _submit(repo)
    for node_id, runtime, isolation in [("n1", "", "none"), ("n2", "podman", "none"), ("pod", "", "pod")]:
        await db.execute(
            "INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat,"
            " container_runtime) VALUES ($1, $1, true, 'READY', 0, now(), $2)",
            node_id,
            runtime,
        )
        await db.execute(
            "INSERT INTO launcher.agents (node_id, epoch, lease_expires_at, isolation)"
            " VALUES ($1, 1, now() + interval '1 hour', $2)",
            node_id,
            isolation,
        )
    async with db.transaction() as conn:
        jobs = await PendingJobs().read(conn, 10)
        snapshot = await load_snapshot(conn, 10)
    assert {job.job_id: job.needs_image_runtime for job in jobs} == {
        image: True,
        allowed: False,
        plain: False,
    }
    assert {n.node_id: n.runs_images for n in snapshot.nodes.values()} == {
        "n1": False,
        "n2": True,
        "pod": True,
    }
