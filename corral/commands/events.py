"""``corral events``: follow the lifecycle event stream (``GET /api/v1/events``).

For people, one line per event: time, type, subject and the event's most telling fields.
With ``--json``, one JSON object per line (JSON Lines) — ``{"cursor": ..., "event":
<the CloudEvents document>}`` — so ``jq`` can read it as it comes and a script can resume
later with ``--last-event-id CURSOR``. The SDK reconnects by itself after a dropped
connection, resuming where it left off. It runs until Ctrl-C (exit 130 is not an error
here: following is the point, so Ctrl-C exits 0), or ``--count N`` events.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from corral.commands.output import JsonFlag, echo
from corral.commands.session import client
from corral.sdk.models import Event

# The fields worth a glance, in the order shown, when an event has them.
_TELLING = ("job_id", "name", "user", "node_id", "state", "exit_code", "reason", "rule", "summary", "detail")


def line(event: Event) -> str:
    stamp = str(event.document.get("time", ""))[:19].replace("T", " ")
    data = event.data
    facts = " ".join(f"{k}={_short(data[k])}" for k in _TELLING if data.get(k) not in (None, ""))
    return f"{stamp}  {event.type}  {event.subject or '-'}  {facts}".rstrip()


def _short(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if " " in text else text


def register(app: typer.Typer) -> None:
    @app.command("events")
    def events(
        ctx: typer.Context,
        types: Annotated[
            list[str] | None, typer.Option("--type", help="event type or prefix, e.g. corral.job.* (repeat)")
        ] = None,
        jobs: Annotated[
            list[str] | None, typer.Option("--job", help="only this job's events (repeat)")
        ] = None,
        vcs: Annotated[list[str] | None, typer.Option("--vc", help="only this VC's jobs (repeat)")] = None,
        last_event_id: Annotated[
            str | None, typer.Option("--last-event-id", metavar="CURSOR", help="resume after this event")
        ] = None,
        count: Annotated[
            int | None, typer.Option("--count", min=1, help="stop after this many events")
        ] = None,
        json_: JsonFlag = False,
    ) -> None:
        """Follow lifecycle events as they happen (yours; every event for admins)."""
        seen = 0
        with client(ctx) as api:
            try:
                for event in api.events(types, jobs, vcs, last_event_id=last_event_id):
                    if json_:
                        echo(json.dumps({"cursor": event.id, "event": event.document}))
                    else:
                        echo(line(event))
                    seen += 1
                    if count is not None and seen >= count:
                        return
            except KeyboardInterrupt:
                return
