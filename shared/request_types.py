"""Values as they come in from outside (a JSON body, a query string): what the OpenAPI
document says they are, and nothing pydantic would make of something else.

Pydantic's lax mode turns ``true`` into 1, ``"8"`` into 8 and ``0.5`` into a date in
1970; the schema says ``integer`` and ``date-time``, and a client that sent those meant
something else, so the API refuses them. Strict mode alone refuses too much: JSON Schema
counts ``8.0`` as an integer, and a date-time always arrives as a string. So request
models are strict (``ConfigDict(strict=True)``) and take their whole numbers as
``Integer`` and their times as ``Timestamp``.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AwareDatetime, BeforeValidator, Strict
from pydantic_core import PydanticCustomError

_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _a_json_integer(value: object) -> object:
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def _not_a_number(value: object) -> object:
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise PydanticCustomError(
            "datetime_type", "Input should be a date-time with its offset, e.g. 2026-05-01T12:00:00Z"
        )
    return value


# A whole number: 8 or 8.0, never true or "8" (``Strict(False)`` inside a strict model).
Integer = Annotated[int, Strict(False), BeforeValidator(_a_json_integer)]
# An RFC 3339 date-time with its offset, never a number of seconds.
Timestamp = Annotated[AwareDatetime, Strict(False), BeforeValidator(_not_a_number)]
