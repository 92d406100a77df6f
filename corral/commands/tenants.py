"""``corral whoami``; ``corral tokens`` / ``token create|revoke``; ``corral users`` /
``user create|set-role|delete`` (admin); ``corral groups`` / ``group create|delete|add|remove``
(admin).

corral token create laptop --scope read --scope submit --expires-in 30d
corral group create vision-team && corral group add vision-team alice
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from corral.commands.alerts import parse_duration
from corral.commands.output import JsonFlag, echo, echo_json, echo_table, when
from corral.commands.session import client
from corral.sdk.models import Group, Token, User

NameArg = Annotated[str, typer.Argument(metavar="NAME")]
UserArg = Annotated[str, typer.Argument(metavar="USER")]


def token_rows(tokens: list[Token]) -> list[list[str]]:
    return [
        [
            t.id,
            t.name,
            t.user,
            ",".join(t.scopes),
            "yes" if t.active else ("revoked" if t.revoked_at else "expired"),
            when(t.expires_at),
        ]
        for t in tokens
    ]


TOKEN_HEADERS = ["TOKEN", "NAME", "USER", "SCOPES", "ACTIVE", "EXPIRES (UTC)"]


def user_rows(users: list[User]) -> list[list[str]]:
    return [[u.name, u.role, ",".join(u.groups) or "-", u.display_name] for u in users]


def group_rows(groups: list[Group]) -> list[list[str]]:
    return [
        [g.name, ",".join(g.members) or "-", ",".join(g.virtual_clusters) or "-", g.description]
        for g in groups
    ]


def register(app: typer.Typer) -> None:
    @app.command("whoami")
    def whoami(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """Who this token acts as: user, role, scopes, groups and the VCs it may use."""
        with client(ctx) as api:
            me = api.whoami()
        if json_:
            echo_json(me)
            return
        echo(f"{me.user} ({me.role}{', admin' if me.is_admin else ''}); scopes {','.join(me.scopes)}")
        echo(
            f"  groups: {', '.join(me.groups) or '-'};"
            f" virtual clusters: {', '.join(me.virtual_clusters) or '-'}"
        )

    @app.command("tokens")
    def tokens(
        ctx: typer.Context,
        user: Annotated[str | None, typer.Option("--user", help="one user's tokens (admins)")] = None,
        json_: JsonFlag = False,
    ) -> None:
        """List tokens (yours; any user's for admins). Secrets are never shown again."""
        with client(ctx) as api:
            items = api.list_tokens(user)
        if json_:
            echo_json(items)
        else:
            echo_table(TOKEN_HEADERS, token_rows(items))

    token = typer.Typer(help="Create or revoke a token.", no_args_is_help=True)
    app.add_typer(token, name="token")

    @token.command("create")
    def create_token(
        ctx: typer.Context,
        name: NameArg,
        scopes: Annotated[
            list[str] | None, typer.Option("--scope", help="read, submit, admin, exec or serve (repeat)")
        ] = None,
        expires_in: Annotated[
            str | None, typer.Option("--expires-in", help="e.g. 30d, 12h (default 90d)")
        ] = None,
        user: Annotated[str | None, typer.Option("--user", help="whose token (admins)")] = None,
        json_: JsonFlag = False,
    ) -> None:
        """A new bearer token, printed once."""
        expires = datetime.now(UTC) + timedelta(seconds=parse_duration(expires_in)) if expires_in else None
        with client(ctx) as api:
            made = api.create_token(name, scopes, expires, user)
        if json_:
            echo_json(made)
            return
        echo_table(TOKEN_HEADERS, token_rows([made]))
        echo(f"token (shown only now, keep it): {made.token}")

    @token.command("revoke")
    def revoke(ctx: typer.Context, token_id: Annotated[str, typer.Argument(metavar="TOKEN")]) -> None:
        """Revoke a token now."""
        with client(ctx) as api:
            api.revoke_token(token_id)
        echo(f"token {token_id} revoked")

    @app.command("users")
    def users(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List users, their roles and groups."""
        with client(ctx) as api:
            items = api.list_users()
        if json_:
            echo_json(items)
        else:
            echo_table(["USER", "ROLE", "GROUPS", "NAME"], user_rows(items))

    user_app = typer.Typer(
        help="Create a user, change a role, or delete a user (admin).", no_args_is_help=True
    )
    app.add_typer(user_app, name="user")

    @user_app.command("create")
    def create_user(
        ctx: typer.Context,
        name: NameArg,
        role: Annotated[str, typer.Option("--role", help="user or admin")] = "user",
        display_name: Annotated[str, typer.Option("--display-name")] = "",
        json_: JsonFlag = False,
    ) -> None:
        """Create a user."""
        with client(ctx) as api:
            made = api.create_user(name, role, display_name)
        if json_:
            echo_json(made)
        else:
            echo_table(["USER", "ROLE", "GROUPS", "NAME"], user_rows([made]))

    @user_app.command("set-role")
    def set_role(
        ctx: typer.Context, name: NameArg, role: Annotated[str, typer.Argument(metavar="ROLE")]
    ) -> None:
        """Change a user's role (user or admin)."""
        with client(ctx) as api:
            changed = api.set_user_role(name, role)
        echo(f"user {changed.name} is now {changed.role}")

    @user_app.command("delete")
    def delete_user(ctx: typer.Context, name: NameArg) -> None:
        """Delete a user (their tokens stop working)."""
        with client(ctx) as api:
            api.delete_user(name)
        echo(f"user {name} deleted")

    @app.command("groups")
    def groups(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List groups, their members and the VCs they grant."""
        with client(ctx) as api:
            items = api.list_groups()
        if json_:
            echo_json(items)
        else:
            echo_table(["GROUP", "MEMBERS", "VCS", "DESCRIPTION"], group_rows(items))

    group = typer.Typer(help="Create or delete a group, add or remove members (admin).", no_args_is_help=True)
    app.add_typer(group, name="group")

    @group.command("create")
    def create_group(
        ctx: typer.Context, name: NameArg, description: Annotated[str, typer.Option("--description")] = ""
    ) -> None:
        """Create a group."""
        with client(ctx) as api:
            api.create_group(name, description)
        echo(f"group {name} created")

    @group.command("delete")
    def delete_group(ctx: typer.Context, name: NameArg) -> None:
        """Delete a group."""
        with client(ctx) as api:
            api.delete_group(name)
        echo(f"group {name} deleted")

    @group.command("add")
    def add(ctx: typer.Context, name: NameArg, user: UserArg) -> None:
        """Add a user to a group."""
        with client(ctx) as api:
            changed = api.add_group_member(name, user)
        echo(f"group {changed.name}: {', '.join(changed.members)}")

    @group.command("remove")
    def remove(ctx: typer.Context, name: NameArg, user: UserArg) -> None:
        """Remove a user from a group."""
        with client(ctx) as api:
            api.remove_group_member(name, user)
        echo(f"{user} removed from group {name}")
