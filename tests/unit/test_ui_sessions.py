"""The web UI's sessions (det_sdk.master.security.Sessions) over a real SQLite store file:
lifetimes, revocation, restarts. A test clock stands in for 12 hours and 7 days; the
HTTP side (cookie, sign-out) is in tests/e2e/test_security.py and tests/e2e/test_ui.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from det_sdk.master.security import ABSOLUTE_SECONDS, IDLE_SECONDS, Sessions
from det_sdk.master.store import Store

TOKEN = "user-token-for-tests"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _sessions(path: Path, clock: Clock) -> Sessions:
    store = Store(path)
    store.add_user_token(TOKEN)
    return Sessions(store, clock=clock)


def test_a_session_idles_out_and_ends_at_its_absolute_lifetime(tmp_path: Path) -> None:
    clock = Clock()
    sessions = _sessions(tmp_path / "m.db", clock)
    sid = sessions.create(TOKEN)
    assert TOKEN not in sid and sessions.valid(sid)
    # used every 11 hours: alive for 7 days, not one second more
    while clock.now + 11 * 3600 < 1_000_000.0 + ABSOLUTE_SECONDS:
        clock.now += 11 * 3600
        assert sessions.valid(sid)
    clock.now = 1_000_000.0 + ABSOLUTE_SECONDS + 1
    assert not sessions.valid(sid)
    idle = sessions.create(TOKEN)
    clock.now += IDLE_SECONDS - 5
    assert sessions.valid(idle)  # a use restarts the idle time
    clock.now += IDLE_SECONDS + 1
    assert not sessions.valid(idle)
    # ended sessions are gone from the database, not merely refused
    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("SELECT COUNT(*) FROM ui_sessions").fetchone() == (0,)


def test_revoked_sessions_stay_revoked_and_restarts_keep_live_ones(tmp_path: Path) -> None:
    clock = Clock()
    sessions = _sessions(tmp_path / "m.db", clock)
    kept, ended = sessions.create(TOKEN), sessions.create(TOKEN)
    assert sessions.valid(kept) and sessions.valid(ended)
    sessions.revoke(ended)
    assert not sessions.valid(ended)
    # the database holds hashes only: its file hands out no working session id
    rows = sqlite3.connect(tmp_path / "m.db").execute("SELECT id, token FROM ui_sessions")
    (stored, token_hash), = rows.fetchall()
    assert kept not in stored and stored.startswith("sha256:") and TOKEN not in token_hash
    clock.now += 3600
    restarted = _sessions(tmp_path / "m.db", clock)  # a master restart: a new process
    assert restarted.valid(kept) and not restarted.valid(ended)
    clock.now += IDLE_SECONDS - 60  # the idle time counts from the last use before it
    assert restarted.valid(kept)


def test_forged_and_malformed_ids_and_a_forgotten_token(tmp_path: Path) -> None:
    clock = Clock()
    sessions = _sessions(tmp_path / "m.db", clock)
    for bad in (None, "", TOKEN, "x" * 43, "a\x00" * 30, "é" * 43, "../" * 20):
        assert not sessions.valid(bad)
    sid = sessions.create(TOKEN)
    other = Store(tmp_path / "other.db")  # a master that never knew this user token
    assert not Sessions(other, clock=clock).valid(sid)
    # a session is only as good as the user token that opened it
    sessions.store._exec("DELETE FROM user_tokens")
    sessions.store._user_tokens.clear()
    assert not sessions.valid(sid)
