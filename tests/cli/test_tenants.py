"""``corral whoami``, ``tokens``/``token``, ``users``/``user``, ``groups``/``group`` against
the real API: an admin makes a user, a group and a token for her; the token works and is
hers; revoked, it is refused (exit 4)."""

from __future__ import annotations

import json

from tests.cli.conftest import Corral
from tests.fixtures.api import Api


async def test_an_admin_manages_users_groups_and_tokens(corral: Corral, api: Api) -> None:
    code, out, err = await corral("--token", api.admin, "whoami", "--json")
    assert code == 0, err
    assert json.loads(out)["is_admin"] is True
    code, out, err = await corral("--token", api.admin, "user", "create", "carol", "--display-name", "Carol")
    assert code == 0, err
    assert out.splitlines()[1].split()[:2] == ["carol", "user"]
    assert (await corral("--token", api.admin, "group", "create", "vision-team"))[0] == 0
    code, out, _ = await corral("--token", api.admin, "group", "add", "vision-team", "carol")
    assert (code, out.strip()) == (0, "group vision-team: carol")
    code, out, _ = await corral("--token", api.admin, "groups", "--json")
    assert [g["members"] for g in json.loads(out) if g["name"] == "vision-team"] == [["carol"]]
    code, out, err = await corral(
        "--token", api.admin, "token", "create", "laptop", "--user", "carol", "--expires-in", "1d", "--json"
    )
    assert code == 0, err
    made = json.loads(out)
    code, out, _ = await corral("--token", made["token"], "whoami", "--json")
    assert (code, json.loads(out)["user"], json.loads(out)["groups"]) == (0, "carol", ["vision-team"])
    code, out, _ = await corral("--token", made["token"], "tokens")
    assert out.splitlines()[1].split()[:3] == [made["id"], "laptop", "carol"]
    code, out, _ = await corral("--token", api.admin, "token", "revoke", made["id"])
    assert (code, out.strip()) == (0, f"token {made['id']} revoked")
    code, _, _ = await corral("--token", made["token"], "whoami")
    assert code == 4
    code, out, _ = await corral("--token", api.admin, "users", "--json")
    assert {"carol", "alice"} <= {u["name"] for u in json.loads(out)}
    code, _, _ = await corral("user", "create", "mallory")  # alice is no admin
    assert code == 4
