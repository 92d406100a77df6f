"""The committed API reference: ``docs/api/openapi.json``, what the API serves at ``/openapi.json``.

``python -m tests.openapi_snapshot`` (``make openapi``) rewrites it from the app;
``tests/api/test_openapi_document.py`` fails when the file and the app disagree, so a
change to the API shows up as a diff of this file in review, and a client author has
the document without running Corral. Keys are sorted and the indentation fixed, so the
file changes only where the API does.

It lives beside the tests, as ``schema_snapshot.py`` does for the database: it builds the
whole app, which the user-facing package has no use for.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from services.api.app import create_app
from services.api.settings import Settings
from shared.db.pool import Database
from shared.service import Health

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "docs" / "api" / "openapi.json"
REGENERATE = "make openapi (python -m tests.openapi_snapshot)"


def api_document() -> dict[str, Any]:
    """The document as the API serves it. The app needs no connection for it: routes and
    models make the document, and nothing asks the pool anything until a request comes."""
    app = create_app(cast(Database, None), Health("api", {}), Settings())
    return app.openapi()


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(render(api_document()))
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
