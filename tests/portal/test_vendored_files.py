"""The portal's front-end files ship with the project: each vendored file is byte for
byte the version its manifest names (sha256), and no template loads anything from
another site."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import httpx

from services.api.portal.rendering import STATIC_DIR

VENDOR = STATIC_DIR / "vendor"
TEMPLATES = STATIC_DIR.parent / "templates"


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _manifest() -> list[dict[str, str]]:
    entries: list[dict[str, str]] = json.loads((VENDOR / "vendor.json").read_text())["files"]
    return entries


def test_every_vendored_file_matches_its_pinned_version_and_hash() -> None:
    entries = _manifest()
    listed = {entry["file"] for entry in entries} | {entry["license"] for entry in entries} | {"vendor.json"}
    assert {path.name for path in VENDOR.iterdir()} == listed, "a vendored file without a manifest entry"
    for entry in entries:
        data = (VENDOR / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], f"{entry['file']} is not the file pinned"
        assert re.fullmatch(r"\d+\.\d+\.\d+", entry["version"]), "an exact version, never a range or latest"
        assert entry["version"] in entry["file"], "the file name carries its version"
        assert (VENDOR / entry["license"]).read_text().strip()
    # htmx 2.x: 4.x is a rewrite with another SSE syntax than the templates use.
    htmx = next(e for e in entries if e["package"] == "htmx.org")
    assert htmx["version"].startswith("2.")


def test_no_template_loads_anything_from_another_site() -> None:
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        for attribute in re.findall(r'(?:src|href)="([^"]*)"', text):
            assert not re.match(r"^(https?:)?//", attribute), f"{template.name} loads {attribute}"


async def test_static_files_are_served_cacheable_with_versioned_urls(portal_app: object) -> None:
    transport = httpx.ASGITransport(app=portal_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        page = await http.get("/login")
        urls = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
        assert len(urls) >= 6
        for url in urls:
            assert re.search(r"\?v=[0-9a-f]{12}$", url), url
            response = await http.get(url)
            assert response.status_code == 200, url
            assert "immutable" in response.headers["cache-control"]
            name = url.split("?")[0].removeprefix("/static/")
            assert response.content == _read(STATIC_DIR / name)
