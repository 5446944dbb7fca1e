"""User tokens' lifetime and their end at a password change (issue 59's leftovers), on a
real SQLite store: what the master's routes ask (det_sdk.master.store.users)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from det_sdk.durations import parse_duration
from det_sdk.errors import UsageError
from det_sdk.master.accounts import Accounts
from det_sdk.master.security import Sessions
from det_sdk.master.store import Store, hash_token


def test_a_token_past_its_lifetime_signs_nobody_in_but_is_known_as_expired(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    accounts = Accounts(store)
    accounts.create("ann", admin=False, password="ann's password")
    token, _ = accounts.login("ann", "ann's password", "127.0.0.1")
    store.add_user_token("masters-own")
    assert store.token_user(hash_token(token))["username"] == "ann"
    assert accounts.expired(token) is None
    store.token_lifetime = 0.0  # a restart with a shorter lifetime applies to old tokens
    assert store.token_user(hash_token(token)) is None
    user, lifetime = accounts.expired(token)
    assert user["username"] == "ann" and lifetime == 0.0
    assert store.is_user_token("masters-own")  # the master's own token is no session
    # forgotten a month after it expired, not before
    assert store.prune_expired_tokens(time.time() + 29 * 86400) == 0
    assert store.prune_expired_tokens(time.time() + 31 * 86400) == 1
    assert accounts.expired(token) is None


def test_a_ui_session_lasts_as_long_as_the_token_lifetime(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    store.token_lifetime = 3600.0
    assert Sessions(store).absolute == 3600.0


def test_a_password_change_ends_every_token_of_that_user_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    accounts = Accounts(store)
    ann = accounts.create("ann", admin=False, password="ann's password")["id"]
    accounts.create("bob", admin=False, password="bob's password")
    tokens = [accounts.login("ann", "ann's password", "127.0.0.1")[0] for _ in range(2)]
    bobs, _ = accounts.login("bob", "bob's password", "127.0.0.1")
    for t in tokens:  # cached as valid first: the change must reach the cache too
        assert store.is_user_token(t)
    accounts.update(ann, ann, password="ann's new password")
    assert not any(store.is_user_token(t) for t in tokens)
    assert accounts.expired(tokens[0]) is None  # ended, not expired
    assert store.is_user_token(bobs)
    # a change of other fields ends nothing
    fresh, _ = accounts.login("ann", "ann's new password", "127.0.0.1")
    accounts.update(ann, None, display_name="Ann")
    assert store.is_user_token(fresh)


@pytest.mark.parametrize("text, seconds", [("168h", 604800.0), ("7d", 604800.0),
                                           ("1h30m", 5400.0), ("90", 90.0)])
def test_lifetimes_read_as_determined_writes_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--token-lifetime") == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-5s", "0", "366d", "1e9", "h"])
def test_bad_lifetimes_are_refused_naming_the_option(text: str) -> None:
    with pytest.raises(UsageError, match="--token-lifetime"):
        parse_duration(text, "--token-lifetime")
