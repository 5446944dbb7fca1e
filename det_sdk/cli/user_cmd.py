"""``det user login/logout/whoami`` over det_sdk's single user.

det_sdk's master has one user, whoever holds its token (``det master up`` saves it in
``~/.det/credentials.json``; elsewhere ``DET_USER_TOKEN``). ``det user login`` checks that
token against the master (asking for it on a terminal when none is saved), as Determined's
scripts call it first; ``logout`` forgets the saved one.

>>> USER_NAME
'determined'
"""

from __future__ import annotations

import sys
from argparse import Namespace

from det_sdk.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "USER_NAME"]


#: the name det_sdk's single user answers to (Determined's default non-admin user)
USER_NAME = "determined"


def _checked(url: str, token: str) -> None:
    from det_sdk.client import MasterClient, MasterError

    client = MasterClient(url, token)
    try:
        client.request("GET", "/api/v1/master")
    except MasterError as err:
        if err.status in (401, 403):
            raise UsageError(f"the master at {url} refuses this token: it is not the token of "
                             "its user (det master up saved the right one on the master's "
                             "machine, in ~/.det/credentials.json)") from None
        raise
    finally:
        client.close()


def user_login(args: Namespace) -> int:
    """``det user login [USERNAME]``: the master's token works (saved for later calls)."""
    from det_sdk.client import load_token, save_token

    token = load_token(args.master)
    if token is None:
        if not sys.stdin.isatty():
            raise UsageError(f"no token for {args.master}: det_sdk's master has one user, "
                             "whose token `det master up` saved on its machine; set "
                             "DET_USER_TOKEN, or run det user login on a terminal to paste it")
        import getpass

        token = getpass.getpass(f"Token of {args.master}'s user (det_sdk has no passwords): ")
    _checked(args.master, token)
    save_token(args.master, token)
    if args.username and args.username != USER_NAME:
        print(f"det_sdk has one user: logged in as that user ('{USER_NAME}'), not "
              f"'{args.username}'", file=sys.stderr)
    print(f"Authenticated as {USER_NAME}.")
    return 0


def user_logout(args: Namespace) -> int:
    """``det user logout``: forget the token saved for this master."""
    import json

    from det_sdk.atomic import write_atomic
    from det_sdk.client import credentials_path

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

    token = load_token(args.master)
    if token is None:
        raise UsageError(f"not logged in to {args.master}: det user login")
    _checked(args.master, token)
    print(f"You are logged in as user '{USER_NAME}'")
    return 0


#: ``det user``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, Any] = {
    "login": (user_login, "check and save the master's user token",
              [("username", {"nargs": "?", "help": f"ignored name: det_sdk has one user "
                                                   f"('{USER_NAME}')"})]),
    "logout": (user_logout, "forget the token saved for this master", []),
    "whoami": (user_whoami, "the user the saved token is", []),
}
