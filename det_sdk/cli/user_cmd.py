"""``det user ...``: Determined 0.38's user commands over the master's users.

The first admin, ``determined``, is the user of the token `det master up` saves in
``~/.det/credentials.json`` (elsewhere ``DET_USER_TOKEN``): a person alone keeps using
that token and never needs a password. Other users sign in with ``det user login NAME``
(a password prompt on a terminal, else ``DET_PASS``, as Determined's scripts give it);
the token the master hands back replaces the saved one for that master, and
``det user logout`` ends it on the master too.

>>> sorted(COMMANDS)[:4]
['activate', 'change-password', 'create', 'deactivate']
"""

from __future__ import annotations

import sys
from argparse import Namespace

from det_sdk.cli.common import refused
from det_sdk.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "USER_NAME"]


#: the first admin's name (the user of `det master up`'s token)
USER_NAME = "determined"


def _client(args: Namespace) -> Any:
    from det_sdk.cli import common

    return common.connect(args)


def _me(client: Any, url: str) -> dict[str, Any]:
    from det_sdk.client import MasterError

    try:
        return dict(client.request("GET", "/api/v1/me")["user"])
    except MasterError as err:
        if err.status == 401 and "expired" in str(err):
            raise UsageError(f"{url}: {err}") from None  # the master says who and how
        if err.status in (401, 403):
            raise UsageError(f"the master at {url} refuses the saved token (signed out, "
                             "expired, or the user is deactivated): det user login NAME"
                             ) from None
        raise


def _password(prompt: str) -> str:
    """A password: from a terminal's prompt, else ``DET_PASS`` (Determined's variable)."""
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(prompt)
    from det_sdk.env import setting

    given = setting("DET_PASS")
    if given is None:
        raise UsageError("no terminal to ask for the password: set DET_PASS")
    return given


def _user_id(client: Any, name: str) -> int:
    from det_sdk.client import MasterError

    try:
        return int(client.request("GET", f"/api/v1/users/{name}/by-username")["user"]["id"])
    except MasterError as err:
        if err.status == 404:
            raise UsageError(f"no user named {name!r} (det user list)") from None
        raise


def user_login(args: Namespace) -> int:
    """``det user login [NAME]``: sign in; the new token is saved for this master. With
    the saved token already that user's (and no ``DET_PASS``), nothing to ask."""
    from det_sdk.client import MasterClient, MasterError, load_token
    from det_sdk.env import setting

    token = load_token(args.master)
    if token is not None and setting("DET_PASS") is None:
        client = MasterClient(args.master, token)
        try:
            me = client.request("GET", "/api/v1/me")["user"]
        except MasterError:
            me = None
        finally:
            client.close()
        if me is not None and args.username in (None, me["username"]):
            print(f"Authenticated as {me['username']}.")
            return 0
    username = args.username
    if username is None:
        if not sys.stdin.isatty():
            raise UsageError("det user login NAME: name the user (no terminal to ask)")
        username = input("Username: ").strip()
    password = _password(f"Password for user '{username}': ")
    print(f"Authenticated as {_sign_in(args.master, username, password)['username']}.")
    return 0


def user_logout(args: Namespace) -> int:
    """``det user logout``: end the saved token on the master (the master's own token,
    `det master up`'s, stays there) and forget it here."""
    import json

    from det_sdk.atomic import write_atomic
    from det_sdk.client import MasterClient, MasterError, credentials_path, load_token

    token = load_token(args.master)
    if token is not None:
        client = MasterClient(args.master, token)
        try:
            client.request("POST", "/api/v1/auth/logout")
        except MasterError:
            pass  # already refused there: forgetting it here is all that is left
        finally:
            client.close()
    path = credentials_path()
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    if saved.pop(args.master.rstrip("/"), None) is not None:
        write_atomic(path, json.dumps(saved, indent=1), mode=0o600)
    return 0


def user_whoami(args: Namespace) -> int:
    from det_sdk.client import load_token

    if load_token(args.master) is None:
        raise UsageError(f"not logged in to {args.master}: det user login")
    me = _me(_client(args), args.master)
    if args.json:
        from det_sdk.cli.render import print_json

        print_json(me)
        return 0
    print(f"You are logged in as user '{me['username']}'")
    return 0


def user_list(args: Namespace) -> int:
    """``det user list [--all]``: the active users (``--all``: the deactivated too)."""
    from det_sdk.cli.render import print_json, print_rows

    users = _client(args).request("GET", "/api/v1/users")["users"]
    users = [u for u in users if args.all or u["active"]]
    if args.json:
        print_json(users)
        return 0
    print_rows(["User ID", "Username", "Display Name", "Admin", "Active"],
               [[u["id"], u["username"], u["display_name"], u["admin"], u["active"]]
                for u in users], False)
    return 0


def user_create(args: Namespace) -> int:
    """``det user create NAME [--admin] [--password P]``: without ``--password``, asked
    twice on a terminal; elsewhere the user is made without one (it signs in once an
    admin sets one: det user change-password NAME)."""
    password = args.password
    if password is None and sys.stdin.isatty():
        password = _password(f"Password for user '{args.username}': ")
        if password != _password("Confirm password: "):
            raise UsageError("passwords do not match")
    body = {"user": {"username": args.username, "admin": bool(args.admin)},
            "password": password or None}
    _client(args).request("POST", "/api/v1/users", json=body)
    return 0


def user_change_password(args: Namespace) -> int:
    """``det user change-password [NAME]``: one's own (or, an admin's, anyone's)."""
    client = _client(args)
    me = _me(client, args.master)
    name = args.target_user or me["username"]
    password = _password(f"New password for user '{name}': ")
    if sys.stdin.isatty() and password != _password("Confirm password: "):
        raise UsageError("passwords do not match")
    user_id = me["id"] if name == me["username"] else _user_id(client, name)
    client.request("POST", f"/api/v1/users/{user_id}/password", json={"password": password})
    if name == me["username"]:
        # the change ended every token of this user, the saved one too: sign in again
        # with the new password, as Determined's CLI does, so this terminal stays in
        _sign_in(args.master, name, password)
    return 0


def _sign_in(master: str, username: str, password: str) -> dict[str, Any]:
    """A new token of ``username`` from the master at ``master``, saved for it; the user."""
    from det_sdk.client import MasterClient, MasterError, save_token

    anonymous = MasterClient(master, None)
    try:
        out = anonymous.request("POST", "/api/v1/auth/login",
                                json={"username": username, "password": password})
    except MasterError as err:
        if err.status == 401:
            raise UsageError(f"login as {username!r} refused: wrong name or password, or "
                             "the user is deactivated") from None
        if err.status == 429:
            raise UsageError(str(err)) from None
        raise
    finally:
        anonymous.close()
    save_token(master, out["token"])
    return dict(out["user"])


def _patch(args: Namespace, name: str, **fields: Any) -> None:
    client = _client(args)
    client.request("PATCH", f"/api/v1/users/{_user_id(client, name)}", json=fields)


def user_activate(args: Namespace) -> int:
    _patch(args, args.username, active=True)
    return 0


def user_deactivate(args: Namespace) -> int:
    """A deactivated user's tokens and web UI sessions stop working at once."""
    _patch(args, args.username, active=False)
    return 0


def user_rename(args: Namespace) -> int:
    """What they own stays theirs (owners are kept by user id), shown by the new name."""
    _patch(args, args.target_user, username=args.new_username)
    return 0


def _bool(text: str) -> bool:
    """``(true|false)``, as Determined's flags (common loaded when a value is parsed)."""
    from det_sdk.cli.common import bool_text

    return bool_text(text)


def user_edit(args: Namespace) -> int:
    """Determined's ``det user edit NAME [--display-name D] [--username U] [--active
    (true|false)] [--admin (true|false)]``: the fields given, in one change."""
    given = {"Display Name": ("display_name", args.display_name),
             "Active": ("active", args.activate), "Username": ("username", args.username),
             "Admin": ("admin", args.admin)}
    fields = {key: value for key, value in given.values() if value is not None}
    if not fields:
        raise UsageError("det user edit: no field provided; use 'det user edit -h' for usage")
    _patch(args, args.target_user, **fields)
    print("Changes made to the following fields: " +
          ", ".join(name for name, (_, value) in given.items() if value is not None))
    return 0


def _name(help_text: str) -> dict[str, Any]:
    return {"help": help_text}


#: ``det user``'s verbs (det_sdk.cli.main assembles the nouns' tables)
def user_link_with_agent_user(args: Namespace) -> int:
    """Determined's ``det user link-with-agent-user NAME --agent-uid --agent-gid
    --agent-user --agent-group`` (admins only): NAME's trials and batch jobs run as that
    Linux account when the master runs as root."""
    missing = [f"--{k.replace('_', '-')}" for k in ("agent_uid", "agent_gid", "agent_user",
                                                  "agent_group") if getattr(args, k) is None]
    if missing:
        raise UsageError(f"det user link-with-agent-user: {', '.join(missing)} required")
    client = _client(args)
    user_id = _user_id(client, args.det_username)
    client.request("PUT", f"/api/v1/users/{user_id}/agent-user", json={
        "agent_uid": args.agent_uid, "agent_gid": args.agent_gid,
        "agent_user": args.agent_user, "agent_group": args.agent_group})
    print(f"Linked user {args.det_username} with the agent user {args.agent_user} "
          f"({args.agent_uid}:{args.agent_gid}, group {args.agent_group})")
    return 0


COMMANDS: dict[str, Any] = {
    "list": (user_list, "list users",
             [(("--all", "-a"), {"action": "store_true",
                                 "help": "the deactivated users too"})]),
    "login": (user_login, "sign in as a user (password: a prompt, or DET_PASS)",
              [("username", {"nargs": "?", "help": "name of the user to log in as"})]),
    "logout": (user_logout, "end the saved token on the master and forget it",
               [(("--all", "-a"), {"action": "store_true",
                                   "help": "the same: one token is saved per master"})]),
    "whoami": (user_whoami, "the user the saved token is", []),
    "create": (user_create, "create a user (admins only)",
               [("username", _name("name of the new user")),
                ("--admin", {"action": "store_true", "help": "give the new user admin rights"}),
                ("--password", {"help": "password of the new user"})]),
    "change-password": (user_change_password, "change a user's password (yours by default)",
                        [("target_user", {"nargs": "?",
                                          "help": "name of the user (an admin's call)"})]),
    "activate": (user_activate, "activate a user (admins only)",
                 [("username", _name("name of the user to activate"))]),
    "deactivate": (user_deactivate, "deactivate a user: their tokens stop working (admins "
                                    "only)",
                   [("username", _name("name of the user to deactivate"))]),
    "rename": (user_rename, "change a user's name (admins only)",
               [("target_user", _name("name of the user to rename")),
                ("new_username", _name("their new name"))]),
    "edit": (user_edit, "edit a user's fields (admins; your own display name)", [
        ("target_user", _name("name of the user to edit")),
        ("--display-name", {"help": "their new display name"}),
        ("--username", {"help": "their new name"}),
        ("--active", {"dest": "activate", "type": _bool, "metavar": "(true|false)",
                      "help": "activate or deactivate them"}),
        ("--admin", {"type": _bool, "metavar": "(true|false)",
                     "help": "give or take admin rights"}),
        ("--remote", refused("det_sdk has no remote (SSO) users: every user signs in with a "
                             "password", takes_value=True))]),
    "link-with-agent-user": (user_link_with_agent_user, "run a user's tasks as a Linux "
                             "account when the master runs as root (admins only)", [
                                 ("det_username", _name("name of the user")),
                                 ("--agent-uid", {"type": int, "help": "the account's uid"}),
                                 ("--agent-gid", {"type": int, "help": "its gid"}),
                                 ("--agent-user", {"help": "the account's name"}),
                                 ("--agent-group", {"help": "its group's name"})]),
}
