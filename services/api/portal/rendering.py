"""Pages and fragments from the Jinja2 templates in ``templates/``.

Autoescaping is on for every template (a job's name, command or log is someone else's
text). Each page extends ``base.html``, which carries the navigation, the CSRF token that
htmx sends with every request it makes, and the static files; a fragment (a table's rows,
a panel) is its own template, which the page includes and the live updates fetch alone,
so the page and its updates are rendered by the same code.

Static files are served under ``/static/`` with a long cache lifetime; their URLs carry
a digest of their content (``static_url``), so a changed file is fetched again at once.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from services.api.portal.session import PortalUser
from shared.clock import utcnow

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATES = Jinja2Templates(directory=HERE / "templates")


@cache
def static_url(name: str) -> str:
    """``/static/<name>?v=<digest>``: cacheable for good, refetched when it changes."""
    digest = hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:12]
    return f"/static/{name}?v={digest}"


def duration(seconds: float | None) -> str:
    """A span as people say it: ``45 s``, ``12 min``, ``3 h 20 min``, ``2 d 4 h``."""
    if seconds is None or math.isnan(seconds):
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 60:
        return f"{minutes:.0f} min"
    hours, minutes = divmod(int(minutes), 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def ago(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    return duration((utcnow() - moment).total_seconds()) + " ago"


def stamp(moment: datetime | None) -> str:
    """A moment in UTC to the second, as the CLI prints it."""
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


TEMPLATES.env.globals["static_url"] = static_url
TEMPLATES.env.filters["duration"] = duration
TEMPLATES.env.filters["ago"] = ago
TEMPLATES.env.filters["stamp"] = stamp


def render(
    request: Request,
    template: str,
    user: PortalUser | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """A page or fragment. ``section`` in the context marks the navigation's current entry."""
    context.setdefault("section", "")
    # Where the event tails were when this was rendered: the page's live stream starts
    # from here, so nothing that happens before it connects goes unnoticed (live.py).
    hub = getattr(request.app.state, "event_hub", None)
    context.setdefault("live_after", hub.position.encode() if hub is not None else "")
    return TEMPLATES.TemplateResponse(
        request, template, {"user": user, **context}, status_code=status_code, headers=_NO_STORE
    )


# Pages show one user's view of live state: never cached, by the browser or a proxy.
_NO_STORE = {"Cache-Control": "no-store"}
