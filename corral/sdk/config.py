"""Where the API is and which token to send: arguments, then the environment, then the
config file ``corral login`` writes, then the local stack's admin token.

=========  ======================  ==================  =====================================
           argument                environment         config file (``corral login``)
=========  ======================  ==================  =====================================
URL        ``Client(url=...)``     ``CORRAL_URL``      ``url = "https://corral.example"``
token      ``Client(token=...)``   ``CORRAL_TOKEN``    ``token = "crl_..."``
=========  ======================  ==================  =====================================

Without any of them the URL is the local stack's (``http://127.0.0.1:$CORRAL_PORT``,
8080 by default) and the token is ``$CORRAL_HOME/admin-token`` (``.corral``), the one
``make up`` writes, so the commands work beside ``make up`` with no setup.

The config file is ``$CORRAL_CONFIG`` if set, else ``$XDG_CONFIG_HOME/corral/config.toml``
(``~/.config/corral/config.toml``). It is TOML, read with the standard library's
``tomllib``, and written with mode 0600 because it holds a bearer token.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from corral.sdk.errors import ConfigurationError


def config_path() -> Path:
    if os.environ.get("CORRAL_CONFIG"):
        return Path(os.environ["CORRAL_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "corral" / "config.toml"


def read_config(path: Path | None = None) -> dict[str, str]:
    """The config file's ``url`` and ``token`` (an absent file is an empty config)."""
    path = path or config_path()
    try:
        document = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read the config file {path}: {exc}") from exc
    return {key: str(document[key]) for key in ("url", "token") if key in document}


def write_config(url: str, token: str, path: Path | None = None) -> Path:
    """Write ``url`` and ``token``, readable by this user only; returns the path."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # A JSON string with ASCII escapes is also a valid TOML basic string.
    text = f"# written by `corral login`\nurl = {json.dumps(url)}\ntoken = {json.dumps(token)}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT
    return path


@dataclass(frozen=True)
class Connection:
    url: str
    token: str


def resolve(url: str | None = None, token: str | None = None) -> Connection:
    """The URL and token to use, by the order in this module's docstring."""
    needs_file = not (url or os.environ.get("CORRAL_URL")) or not (token or os.environ.get("CORRAL_TOKEN"))
    stored = read_config() if needs_file else {}
    url = (
        url
        or os.environ.get("CORRAL_URL")
        or stored.get("url")
        or f"http://127.0.0.1:{os.environ.get('CORRAL_PORT', '8080')}"
    )
    token = token or os.environ.get("CORRAL_TOKEN") or stored.get("token") or _local_admin_token()
    return Connection(url.rstrip("/"), token)


def _local_admin_token() -> str:
    path = Path(os.environ.get("CORRAL_HOME", ".corral")) / "admin-token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise ConfigurationError(
            f"no token: run `corral login`, set CORRAL_TOKEN, or run where {path} exists (make up writes it)"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read the admin token {path}: {exc}") from exc
