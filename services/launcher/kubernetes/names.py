"""Names, labels and DNS names of Corral's Kubernetes objects, and the rendezvous rewrite.

One Pod per task attempt, named by the attempt id (``att-<ulid>`` is already a valid DNS
label), so ``stop`` and ``logs`` find a pod without a lookup and a second ``start`` of the
same attempt collides with the first (409) instead of running it twice. One headless
Service per job, named by the job id; every pod of the job sets ``subdomain`` to it and
``hostname`` to ``<role>-<index>``, which gives the task a stable DNS name across
attempts: ``<role>-<index>.<job>.<namespace>.svc``. The rendezvous environment
(``MASTER_ADDR``, ``PAI_HOST_IP_<role>_<i>``) is rewritten to those names, because the
node addresses the launcher computed mean nothing inside a pod network.
"""

from __future__ import annotations

import hashlib
import re

LABEL_PREFIX = "corral.dev"
JOB_LABEL = f"{LABEL_PREFIX}/job"
ROLE_LABEL = f"{LABEL_PREFIX}/role"
INDEX_LABEL = f"{LABEL_PREFIX}/index"
ATTEMPT_LABEL = f"{LABEL_PREFIX}/attempt"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "corral"
ATTEMPT_ID_ANNOTATION = f"{LABEL_PREFIX}/attempt-id"
GENERATION_ANNOTATION = f"{LABEL_PREFIX}/generation"
NODE_ANNOTATION = f"{LABEL_PREFIX}/node"

# Every object the driver owns carries both; the watch and reconcile select on them.
POD_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY},{JOB_LABEL}"

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class InvalidNameError(ValueError):
    """A Corral id that cannot name a Kubernetes object."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def dns_label(text: str) -> str:
    """``text`` as an RFC 1035 label; unchanged when it already is one.

    Anything changed gets a digest of the original appended, so two names that
    sanitise alike (``a_b``, ``a-b``) still differ.
    """
    if _DNS_LABEL.match(text):
        return text
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"x-{cleaned}".rstrip("-")
    return f"{cleaned[:54].rstrip('-')}-{_digest(text)}"


def label_value(text: str) -> str:
    """``text`` as a label value (63 characters at most); unchanged when it already is one."""
    if _LABEL_VALUE.match(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    return f"{cleaned[:54].rstrip('-_.')}-{_digest(text)}".lstrip("-")


def pod_name(attempt_id: str) -> str:
    if not _DNS_LABEL.match(attempt_id):
        raise InvalidNameError(f"attempt id {attempt_id!r} is not a DNS label; Corral's ids (att-...) are")
    return attempt_id


def service_name(job_id: str) -> str:
    return dns_label(job_id)


def pod_hostname(role: str, index: int) -> str:
    return dns_label(f"{role}-{index}")


def pod_dns_name(job_id: str, role: str, index: int, namespace: str, cluster_domain: str = "") -> str:
    """``<role>-<index>.<service>.<namespace>.svc[.<cluster domain>]``."""
    name = f"{pod_hostname(role, index)}.{service_name(job_id)}.{namespace}.svc"
    return f"{name}.{cluster_domain}" if cluster_domain else name


def _env_token(name: str) -> str:
    return name.replace("-", "_")  # as services/launcher/agent/environment.py does


def kubernetes_environment(
    env: dict[str, str], *, job_id: str, namespace: str, cluster_domain: str = ""
) -> dict[str, str]:
    """``env`` with every task's host address replaced by its pod's DNS name.

    Works from the environment alone: the roles are in ``PAI_TASK_ROLE_LIST`` (spec
    order, so the master — rank 0 — is the first role's instance 0) and their instance
    counts in ``PAI_TASK_ROLE_TASK_COUNT_<role>``. A task that is not distributed (no
    role list) is returned unchanged.
    """
    roles = [r for r in env.get("PAI_TASK_ROLE_LIST", "").split(",") if r]
    if not roles:
        return dict(env)
    rewritten = dict(env)
    for role in roles:
        count = int(env.get(f"PAI_TASK_ROLE_TASK_COUNT_{_env_token(role)}", "0"))
        for index in range(count):
            key = f"PAI_HOST_IP_{_env_token(role)}_{index}"
            rewritten[key] = pod_dns_name(job_id, role, index, namespace, cluster_domain)
    if "MASTER_ADDR" in env:
        rewritten["MASTER_ADDR"] = pod_dns_name(job_id, roles[0], 0, namespace, cluster_domain)
    return rewritten
