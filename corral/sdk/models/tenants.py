"""Users, groups and tokens, and who the caller is."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from corral.sdk.models.base import Model


class WhoAmI(Model):
    user: str
    role: str
    is_admin: bool
    scopes: list[str]
    token_id: str | None = None
    groups: list[str] = Field(default_factory=list)
    virtual_clusters: list[str] = Field(default_factory=list)


class User(Model):
    name: str
    role: str
    display_name: str = ""
    groups: list[str] = Field(default_factory=list)
    created_at: datetime
    created_by: str = ""


class Group(Model):
    name: str
    description: str = ""
    members: list[str] = Field(default_factory=list)
    virtual_clusters: list[str] = Field(default_factory=list)
    created_at: datetime
    created_by: str = ""


class Token(Model):
    id: str
    name: str
    user: str
    scopes: list[str]
    created_at: datetime
    created_by: str = ""
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    active: bool


class TokenCreated(Token):
    token: str = Field(description="the bearer token, shown this once: keep it")
