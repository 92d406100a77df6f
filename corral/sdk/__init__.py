"""The Corral SDK: typed Python clients for Corral's HTTP API, sync and async.

    from corral.sdk import Client, ApiError

    with Client() as corral:            # CORRAL_URL / CORRAL_TOKEN, or `corral login`
        job = corral.submit_file("train.yaml")
        try:
            corral.cancel("job-nope")
        except ApiError as error:
            print(error.status, error.slug, error.detail)   # 404 not-found no job with id ...

Layout: ``client.py`` / ``aclient.py`` (the two clients), ``operations.py`` (every
request, shared by both; ``registry.py``: models and artifacts, ``serving.py``: services,
mixed into both),
``models/`` (typed results), ``errors.py``, ``retries.py``,
``sse.py`` (the event-stream parser), ``config.py`` (URL and token), ``specs.py`` (job
spec files), ``interactive.py`` and ``channels.py`` (exec and port-forward into running
tasks, over the API's WebSocket). The SDK depends on httpx, pydantic, PyYAML and
websockets only — never on Corral's server code (an import-linter contract keeps it
so) — so it can ship on its own.
"""

from corral.sdk.aclient import AsyncClient
from corral.sdk.client import Client
from corral.sdk.config import config_path, read_config, resolve, write_config
from corral.sdk.errors import ApiError, ConfigurationError, ConnectionFailed, CorralError
from corral.sdk.specs import SpecError, load_job_spec

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConfigurationError",
    "ConnectionFailed",
    "CorralError",
    "SpecError",
    "config_path",
    "load_job_spec",
    "read_config",
    "resolve",
    "write_config",
]
