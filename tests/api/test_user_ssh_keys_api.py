"""Users' ssh keys through the API (``/api/v1/users/me/ssh-keys``) and the submit of a job
that names them (``ssh.user_keys``): a wrong key text is a 422 that says what is wrong,
each user sees only their own, and a name the submitter keeps no key under refuses the
submit, naming it, with nothing stored. alice and bob are plain users."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from services.launcher.job_keys import new_key_pair
from shared.db.pool import Database


@dataclass
class People:
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient


def _as(client: httpx.AsyncClient, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": f"Bearer {token}"}
    )


@pytest.fixture
async def people(client: httpx.AsyncClient) -> AsyncIterator[People]:
    tokens = {}
    for user in ("alice", "bob"):
        assert (await client.post("/api/v1/users", json={"name": user})).status_code == 201
        body = {"name": "t", "user": user, "scopes": ["read", "submit"]}
        tokens[user] = (await client.post("/api/v1/tokens", json=body)).json()["token"]
    async with _as(client, tokens["alice"]) as alice, _as(client, tokens["bob"]) as bob:
        yield People(alice, bob)


def _job(ssh: dict[str, Any]) -> dict[str, Any]:
    task = {"name": "main", "command": "sleep 1", "resources": {"gpus": 0}}
    return {"name": "train", "tasks": [task], "ssh": ssh}


async def _jobs(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM api.jobs"))


async def test_a_user_keeps_replaces_lists_and_deletes_keys_of_their_own(people: People) -> None:
    first, second = new_key_pair("alice@laptop").public, new_key_pair("alice@desk").public
    made = await people.alice.put("/api/v1/users/me/ssh-keys/laptop", json={"public_key": f"  {first}\n"})
    assert made.status_code == 201, made.text
    assert made.json()["public_key"] == first  # (stripped)
    replaced = await people.alice.put("/api/v1/users/me/ssh-keys/laptop", json={"public_key": second})
    assert replaced.status_code == 200
    assert replaced.json()["public_key"] == second
    listed = (await people.alice.get("/api/v1/users/me/ssh-keys")).json()["items"]
    assert [(k["name"], k["public_key"]) for k in listed] == [("laptop", second)]
    assert (await people.bob.get("/api/v1/users/me/ssh-keys")).json()["items"] == []
    assert (await people.bob.get("/api/v1/users/me/ssh-keys/laptop")).status_code == 404
    assert (await people.bob.delete("/api/v1/users/me/ssh-keys/laptop")).status_code == 404
    assert (await people.alice.delete("/api/v1/users/me/ssh-keys/laptop")).status_code == 204
    missing = await people.alice.get("/api/v1/users/me/ssh-keys/laptop")
    assert missing.status_code == 404
    assert "no ssh key named 'laptop'" in missing.text


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        'command="rm -rf /" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx6 me',
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx6YWJj\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx6YWJj",
        "",
    ],
)
async def test_text_that_is_not_one_public_key_is_refused_saying_what_is_wrong(
    people: People, text: str
) -> None:
    refused = await people.alice.put("/api/v1/users/me/ssh-keys/laptop", json={"public_key": text})
    assert refused.status_code == 422, refused.text
    assert "not an OpenSSH public key" in refused.text
    assert "public_key" in refused.text  # the field that is wrong
    assert (await people.alice.get("/api/v1/users/me/ssh-keys")).json()["items"] == []


async def test_a_bad_key_name_is_refused(people: People) -> None:
    key = new_key_pair("x").public
    refused = await people.alice.put("/api/v1/users/me/ssh-keys/Bad%20Name", json={"public_key": key})
    assert refused.status_code == 422


async def test_a_submit_naming_a_key_the_user_does_not_keep_is_refused_naming_it(
    people: People, db: Database
) -> None:
    key = new_key_pair("alice@laptop").public
    assert (await people.alice.put("/api/v1/users/me/ssh-keys/laptop", json={"public_key": key})).is_success
    before = await _jobs(db)
    refused = await people.bob.post(
        "/api/v1/jobs", json=_job({"user_keys": ["laptop"]})
    )  # alice's, not bob's
    assert refused.status_code == 422, refused.text
    assert "ssh.user_keys" in refused.text
    assert "'laptop'" in refused.text
    refused = await people.alice.post("/api/v1/jobs", json=_job({"user_keys": ["laptop", "phone", "tablet"]}))
    assert refused.status_code == 422
    assert "'phone', 'tablet'" in refused.text
    assert "'laptop'" not in refused.text
    assert await _jobs(db) == before
    accepted = await people.alice.post("/api/v1/jobs", json=_job({"user_keys": ["laptop"], "barrier": True}))
    assert accepted.status_code == 201, accepted.text
    stored = accepted.json()["spec"]
    assert stored["tasks"][0]["ports"] == {"ssh": 1}  # every role gets the ssh port label
    assert stored["ssh"]["user_keys"] == ["laptop"]


async def test_a_spec_with_a_wrong_authorized_key_or_a_barrier_without_between_tasks_is_refused(
    people: People,
) -> None:
    refused = await people.alice.post("/api/v1/jobs", json=_job({"authorized_keys": ["hello"]}))
    assert refused.status_code == 422
    assert "not an OpenSSH public key" in refused.text
    refused = await people.alice.post("/api/v1/jobs", json=_job({"barrier": True, "between_tasks": False}))
    assert refused.status_code == 422
    assert "between_tasks" in refused.text
