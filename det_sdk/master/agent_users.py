"""Tasks run as their owner (issue 59, item 4): Determined's ``det user link-with-agent-user
NAME --agent-uid --agent-gid --agent-user --agent-group`` links a user to a Linux account;
when the master runs as root, that user's trials and batch jobs run as that account
(setuid/setgid at launch), their files created as it.

Kept in a table of its own (``agent_users``, made on first use). What a linked task needs:
its task directory (``<tasks dir>/<kind>/<id>``: its working directory, exit status and
failure records) is chowned to the account; the directories above it become traversable
(mode ``o+x``, never listable), and the checkpoint directory its trials write to becomes
``1733`` (others may create entries there but neither list nor remove them): a
checkpoint is created by the account with the task's umask (077), readable by it and the
master (root) only. A master not running as root runs every task as its own account, as
before (docs/security.md).

>>> check_link(1001, 1001, "ann", "ann")
>>> check_link(0, 0, "root", "root")
Traceback (most recent call last):
...
det_sdk.master.errors.InvalidRequest: agent_uid: expected a non-root uid (1 to 2147483647), got 0
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from det_sdk.master.errors import InvalidRequest, NotFound

__all__ = ["AgentUsers", "check_account", "check_link", "prepare_task_dirs"]

log = logging.getLogger("det_sdk.master.agent_users")

_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?")
_MAX_ID = 2**31 - 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_users (
    user_id INTEGER PRIMARY KEY, agent_uid INTEGER NOT NULL, agent_gid INTEGER NOT NULL,
    agent_user TEXT NOT NULL, agent_group TEXT NOT NULL
)"""


def check_link(uid: Any, gid: Any, user: Any, group: Any) -> None:
    """Refuse (InvalidRequest, naming the field) what is not a plain non-root account."""
    for field, value in (("agent_uid", uid), ("agent_gid", gid)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_ID:
            raise InvalidRequest(f"{field}: expected a non-root {field[6:]} (1 to {_MAX_ID}), "
                                 f"got {value!r}")
    for field, value in (("agent_user", user), ("agent_group", group)):
        if not isinstance(value, str) or not _NAME.fullmatch(value):
            raise InvalidRequest(f"{field}: expected a Linux account name (lower case, up to "
                                 f"32 characters), got {value!r}")


def check_account(uid: int, gid: int, user: str, group: str) -> None:
    """Refuse a link to an account this host does not have as given: the tasks are
    launched here (a typo would run them as a uid nobody owns)."""
    import grp
    import pwd

    try:
        found_uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        found_uid = None
    if found_uid != uid:
        raise InvalidRequest(f"agent_user: this host has no account {user!r} with uid {uid}"
                             + (f" (its uid is {found_uid})" if found_uid is not None else ""))
    try:
        found_gid = grp.getgrnam(group).gr_gid
    except KeyError:
        found_gid = None
    if found_gid != gid:
        raise InvalidRequest(f"agent_group: this host has no group {group!r} with gid {gid}"
                             + (f" (its gid is {found_gid})" if found_gid is not None else ""))


class AgentUsers:
    """The links of users to Linux accounts, over the master's store."""

    def __init__(self, store: Any) -> None:
        self.store = store
        store._exec(_SCHEMA)

    def link(self, user_id: int, uid: int, gid: int, user: str, group: str) -> dict[str, Any]:
        check_link(uid, gid, user, group)
        check_account(uid, gid, user, group)
        if self.store.user(user_id) is None:
            raise NotFound(f"no user {user_id}")
        self.store._exec("INSERT OR REPLACE INTO agent_users VALUES (?, ?, ?, ?, ?)",
                         user_id, uid, gid, user, group)
        log.info("user %d: tasks run as %s:%s (%d:%d) when the master is root", user_id,
                 user, group, uid, gid)
        return self.of(user_id) or {}

    def of(self, user_id: int | None) -> dict[str, Any] | None:
        """The account user ``user_id``'s tasks run as (None: the master's own)."""
        owner = self.store.owner_or_first(user_id)
        return self.store._one("SELECT agent_uid, agent_gid, agent_user, agent_group FROM "
                               "agent_users WHERE user_id = ?", owner)

    def for_task(self, task_type: str, task_id: int) -> tuple[int, int] | None:
        """(uid, gid) a trial or batch job runs as: its owner's linked account when the
        master is root; None otherwise (the master's account)."""
        if os.geteuid() != 0:
            return None
        owner: int | None
        if task_type == "TRIAL":
            t = self.store.trial(task_id)
            exp = self.store.experiment(t["experiment_id"]) if t is not None else None
            if exp is None:
                return None
            owner = exp["owner_id"]
        elif task_type == "GENERIC":
            job = self.store.job(task_id)
            if job is None:
                return None
            owner = job["owner_id"]
        else:
            return None  # commands, shells, notebooks: the master's account (their own table)
        link = self.of(owner)
        return (int(link["agent_uid"]), int(link["agent_gid"])) if link else None


def _traversable(path: Path, stop: Path) -> None:
    """``o+x`` on ``path`` and its parents up to ``stop`` (excluded above): enough to
    reach a task's directory, not to list anything."""
    for p in [path, *path.parents]:
        if p == Path(p.anchor):
            break
        try:
            mode = p.stat().st_mode
            if not mode & 0o001:
                p.chmod((mode & 0o7777) | 0o001)
        except OSError as err:
            log.warning("cannot make %s traversable: %s", p, err)
        if p == stop:
            break


def prepare_task_dirs(task_dir: Path, uid: int, gid: int, env: dict[str, str]) -> None:
    """Make ``task_dir`` the account's (recursively) and the way to it and to the trial's
    checkpoint directory open to it (see the module's docstring)."""
    task_dir.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(task_dir):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, gid)
    os.chown(task_dir, uid, gid)
    _traversable(task_dir.parent, Path("/"))
    try:
        storage = json.loads(env.get("DET_EXPERIMENT_CONFIG") or "{}").get(
            "checkpoint_storage") or {}
    except ValueError:
        storage = {}
    host_path = storage.get("host_path") if isinstance(storage, dict) else None
    if isinstance(host_path, str) and host_path:
        bases = [Path(host_path)]
        sub = storage.get("storage_path")
        if isinstance(sub, str) and sub:
            bases.append(Path(host_path) / sub)
        for base in bases:
            base.mkdir(parents=True, exist_ok=True)
            base.chmod(0o1733)  # create, not list or remove others' (sticky)
        _traversable(bases[0].parent, Path("/"))
