"""The base of every result model.

The SDK's models are the client's own copies of the API's response shapes, not imports
of the server's: a published client cannot depend on the server's code, and a client
must keep working when the server adds a field. So unknown fields are kept (``extra =
"allow"``: ``model_dump()`` and ``corral ... --json`` show them) and only what the client
reads is declared. Times are timezone-aware ``datetime``s, as the API sends them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Detail(Model):
    """An answer that is a sentence: ``{"detail": "..."}`` (202s that the owner carries out)."""

    detail: str
