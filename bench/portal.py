"""The web portal on a big cluster's data (``python -m bench.portal``).

Starts a private stack as ``make up`` does with **the API alone** (``CORRAL_SERVICES=api``:
the portal is served by the API process, and no scheduler or monitor competes for the
two cores or rewrites the seeded rows), then writes a day of a big cluster straight into
its Postgres (``bench/portal_seed.py``): ``--jobs`` jobs over the last day with their
attempts, ``--nodes`` nodes of 8 simulated H100s with their latest readings, a day of
GPU history at the monitor's coarse resolution (5 min: what the pages read for a day)
and ``--fine-hours`` of it at the fine one (10 s: what they read for a job or the last
half hour), the GPUs held by running jobs naming them (and folded into each job's daily usage, as
the monitor does), alerts. The monitor keeps a day of
the fine history, 35 million rows for 4,000 GPUs, which take many minutes to write on a
small machine; the pages read it by job and by recent time only, so two hours of it
(3 million rows) is the default and ``--fine-hours 24`` the whole day. Signed in as the
admin, it measures for each page:

- ``server_ms``: the median of ``--requests`` sequential GETs (after 3 untimed ones),
  request sent to the last byte read, over keep-alive HTTP on the loopback: the server's
  time to answer, with the session check and every query of the page;
- ``first_render_ms``: in Chromium (``/usr/bin/chromium``, headless), navigation start
  to first contentful paint (``performance`` paint timing), the median of ``--loads``
  loads after one untimed load (static files are then cached, as they are for anyone
  who has opened the portal once; they are immutable and versioned). ``--screenshots DIR``
  keeps a full-page PNG of each page as it looks on such a cluster.

The jobs list is measured twice: an admin's own jobs (``jobs_mine``, a sixth of them)
and everyone's (``jobs``: ``?user=*``, all ``--jobs``).

Then **live pages**: ``--live-pages`` open pages, each as a browser tab holds it: one SSE
connection to its ``/live/…`` view and one keep-alive connection on which, at every
``changed`` message, it fetches again each panel that the page marks
``hx-trigger="sse:changed"`` (read from the page's own HTML, as htmx does). The pages
are spread over the jobs list, home, nodes and alerts (``--live-mix``). For
``--live-seconds`` nothing happens (``live_idle_api_cpu_pct``: what open pages of a quiet
cluster cost; the home and nodes pages still refresh every
``CORRAL_API_PORTAL_TELEMETRY_REFRESH_S``), then as long again ``--event-rate``
``job.submitted`` events per second are published straight to JetStream, as the API's
own outbox would (``live_busy_api_cpu_pct``). These clients (``bench/portal_live.py``) are
plain asyncio sockets in this process, not 100 Chromium tabs: on a small machine the
browsers would take the cores the API is measured on. CPU is the API process's utime +
stime from /proc.

Prints one JSON line last: ``max_first_render_ms``, ``pages`` (per page
``{server_ms, first_render_ms}``), the live figures, and the seeding's size and time.
Targets: every page's first render ≤ 300 ms, the job list ≤ 100 ms on the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.portal_live import SESSION_COOKIE, live_load
from bench.portal_seed import (
    COARSE_RESOLUTION_S,
    FINE_RESOLUTION_S,
    analyze,
    fold_job_usage,
    seed_alerts,
    seed_gpu_history,
    seed_jobs,
    seed_nodes,
    seed_virtual_clusters,
)
from bench.stack import BenchStack, private_stack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
USERS = ("admin", "alice", "bob", "carol", "dave", "erin")
_SIGN_IN = re.compile(r'name="sign_in_token" value="([^"]+)"')


def pages_to_measure(job_id: str, node_id: str) -> dict[str, str]:
    return {
        "home": "/",
        "jobs": "/jobs?user=*",
        "jobs_mine": "/jobs",
        "job": f"/jobs/{job_id}",
        "nodes": "/nodes",
        "node": f"/nodes/{node_id}",
        "vcs": "/virtual-clusters",
        "alerts": "/alerts",
        "usage": "/usage",
    }


async def seed(stack: BenchStack, args: argparse.Namespace) -> dict[str, Any]:
    conn = await asyncpg.connect(stack.database_url())
    started = time.monotonic()
    try:
        await seed_virtual_clusters(conn)
        gpus = await seed_nodes(conn, args.nodes)
        await seed_jobs(conn, args.jobs, users=USERS)
        fine = await seed_gpu_history(conn, hours=args.fine_hours, resolution_s=FINE_RESOLUTION_S)
        coarse = await seed_gpu_history(conn, hours=args.history_hours, resolution_s=COARSE_RESOLUTION_S)
        await fold_job_usage(conn)
        await seed_alerts(conn)
        await analyze(conn)
        job_id = await conn.fetchval(
            "SELECT id FROM api.jobs WHERE username = 'admin'"
            " ORDER BY state = 'RUNNING' DESC, created_at DESC LIMIT 1"
        )
    finally:
        await conn.close()
    return {
        "jobs": args.jobs,
        "nodes": args.nodes,
        "gpus": gpus,
        "history_rows": fine + coarse,
        "seed_s": round(time.monotonic() - started, 1),
        "job_id": job_id,
    }


async def sign_in(base_url: str, token: str) -> str:
    """The session cookie's secret, through the sign-in form as a browser gets it."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        form = await http.get("/login")
        found = _SIGN_IN.search(form.text)
        if found is None:
            raise RuntimeError(f"no sign-in form at /login: {form.status_code}")
        answer = await http.post(
            "/login", data={"token": token, "sign_in_token": found.group(1), "next": "/"}
        )
        if answer.status_code != 303 or SESSION_COOKIE not in answer.cookies:
            raise RuntimeError(f"sign-in refused: {answer.status_code} {answer.text[:300]}")
        return str(answer.cookies[SESSION_COOKIE])


async def server_times(base_url: str, secret: str, paths: dict[str, str], requests: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=base_url, cookies={SESSION_COOKIE: secret}, timeout=60) as http:
        for name, path in paths.items():
            status = 0
            for _ in range(3):
                status = (await http.get(path)).status_code
            if status != 200:
                found[name] = {"status": status}
                continue
            took = []
            for _ in range(requests):
                started = time.perf_counter()
                await http.get(path)
                took.append((time.perf_counter() - started) * 1000)
            found[name] = {
                "server_ms": round(statistics.median(took), 1),
                "server_max_ms": round(max(took), 1),
            }
    return found


async def first_renders(
    base_url: str, secret: str, paths: dict[str, str], loads: int, screenshots: Path | None
) -> dict[str, float]:
    """Median first contentful paint of each page; ``screenshots``: a full-page PNG of
    each there, to look at the pages on a big cluster."""
    from playwright.async_api import async_playwright

    found: dict[str, float] = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        await context.add_cookies([{"name": SESSION_COOKIE, "value": secret, "url": base_url}])
        page = await context.new_page()
        for name, path in paths.items():
            times = []
            for load in range(loads + 1):
                await page.goto(base_url + path, wait_until="load")
                await page.wait_for_function(
                    "performance.getEntriesByName('first-contentful-paint').length > 0", timeout=10_000
                )
                fcp = await page.evaluate(
                    "performance.getEntriesByName('first-contentful-paint')[0].startTime"
                )
                if load:  # the first fills the cache
                    times.append(float(fcp))
            found[name] = round(statistics.median(times), 1)
            if screenshots is not None:
                await page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
        await browser.close()
    return found


async def measure(stack: BenchStack, args: argparse.Namespace) -> dict[str, Any]:
    seeded = await seed(stack, args)
    secret = await sign_in(stack.base_url, stack.token())
    paths = pages_to_measure(seeded.pop("job_id"), "node-0000")
    pages = await server_times(stack.base_url, secret, paths, args.requests)
    ok = {name: paths[name] for name, page in pages.items() if "server_ms" in page}
    renders = (
        await first_renders(stack.base_url, secret, ok, args.loads, args.screenshots) if args.loads else {}
    )
    for name, ms in renders.items():
        pages[name]["first_render_ms"] = ms
    result: dict[str, Any] = {"seeded": seeded}
    if args.live_pages:
        result |= await live_load(stack, secret, args)
    result["pages"] = pages
    result["max_first_render_ms"] = max(renders.values(), default=None)
    result["max_server_ms"] = max((p["server_ms"] for p in pages.values() if "server_ms" in p), default=None)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.portal", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs seeded over the last day")
    parser.add_argument("--nodes", type=int, default=500, help="nodes of 8 GPUs seeded")
    parser.add_argument("--history-hours", type=float, default=24.0, help="hours of 5-minute GPU history")
    parser.add_argument(
        "--fine-hours", type=float, default=2.0, help="hours of 10-second GPU history (the monitor keeps 24)"
    )
    parser.add_argument("--requests", type=int, default=20, help="timed GETs per page")
    parser.add_argument("--loads", type=int, default=5, help="timed Chromium loads per page (0: skip)")
    parser.add_argument("--live-pages", type=int, default=100, help="open live pages (0: skip)")
    parser.add_argument(
        "--live-mix", default="/jobs=60,/=20,/nodes=10,/alerts=10", help="page=weight,... of the live pages"
    )
    parser.add_argument("--live-seconds", type=float, default=30.0, help="length of the idle and busy phases")
    parser.add_argument("--event-rate", type=float, default=5.0, help="job events/s in the busy phase")
    parser.add_argument("--screenshots", type=Path, help="a folder for a full-page PNG of each page")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    args = parser.parse_args(argv)
    if args.screenshots is not None:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    with private_stack(keep=args.keep, extra_env={"CORRAL_SERVICES": "api"}) as stack:
        result = asyncio.run(measure(stack, args))
    print(json.dumps({"bench": "portal", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
