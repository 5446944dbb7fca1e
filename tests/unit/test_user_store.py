"""The users' tables (det_sdk.master.store.users, issue 59): an older database opens with
its token and its work the first admin's; tokens end with deactivation; a web UI
sign-in's token ends with its last session."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from det_sdk.master.security import Sessions
from det_sdk.master.store import Store, hash_token
from det_sdk.master.store.users import FIRST_ADMIN


def test_an_older_database_keeps_its_token_and_its_work_is_the_first_admin_s(
        tmp_path: Path) -> None:
    path = tmp_path / "master.db"
    with sqlite3.connect(path) as db:  # the tables as they were before users
        db.execute("CREATE TABLE user_tokens (token TEXT PRIMARY KEY, created REAL NOT NULL)")
        db.execute("INSERT INTO user_tokens VALUES (?, 1.0)", (hash_token("old-token"),))
        db.execute("CREATE TABLE experiments (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT,"
                   " config TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL,"
                   " created REAL NOT NULL, ended REAL)")
        db.execute("INSERT INTO experiments (name, config, state, archive, created)"
                   " VALUES ('old', '{}', 'COMPLETED', 'a', 1.0)")
    db.close()
    store = Store(path)
    user = store.token_user(hash_token("old-token"))
    assert user is not None and user["id"] == FIRST_ADMIN and user["admin"]
    assert store.owner_of("experiment", "1") == FIRST_ADMIN
    assert store.owner_of("experiment", "2") is False


def test_tokens_end_with_deactivation_and_stay_ended(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    ann = store.create_user("ann", admin=False, password=None)
    store.add_user_token("ann-token", user_id=ann)
    assert store.is_user_token("ann-token")
    store.update_user(ann, active=False)
    assert not store.is_user_token("ann-token")
    store.update_user(ann, active=True)
    assert not store.is_user_token("ann-token")  # revoked, not suspended
    # the master's own token is the first admin's: suspended with it, back with it
    store.add_user_token("master-token")
    store.create_user("root2", admin=True, password=None)
    store.update_user(FIRST_ADMIN, active=False)
    assert not store.is_user_token("master-token")
    store.update_user(FIRST_ADMIN, active=True)
    assert store.is_user_token("master-token")


def test_a_web_sign_in_s_token_goes_once_no_session_uses_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    ann = store.create_user("ann", admin=False, password=None)
    store.add_user_token("ui-token", user_id=ann, ui=True)
    store.add_user_token("cli-token", user_id=ann)
    sessions = Sessions(store)
    sid = sessions.create("ui-token")
    assert sessions.user_of(sid)["username"] == "ann"
    with store.tx() as db:  # as if signed in two minutes ago
        db.execute("UPDATE user_tokens SET created = created - 120")
    sessions.revoke(sid)
    assert not store.is_user_token("ui-token")
    assert store.is_user_token("cli-token")  # a sign-out of the UI ends no CLI token
