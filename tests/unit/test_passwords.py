"""Passwords and the sign-in limit (det_sdk.master.passwords, issue 59), on a fake clock."""

from __future__ import annotations

from det_sdk.master.passwords import (
    SignInLimiter,
    hash_password,
    password_problem,
    verify_password,
)


def test_hashes_are_salted_scrypt_and_verify_only_their_password() -> None:
    a, b = hash_password("same password"), hash_password("same password")
    assert a != b and a.startswith("scrypt$") and "same password" not in a
    assert verify_password("same password", a) and verify_password("same password", b)
    assert not verify_password("Same password", a)
    assert not verify_password("x", None) and not verify_password("x", "md5$abc")
    assert not verify_password("x", "scrypt$garbled")
    assert password_problem(12345678) == "password: expected a string"
    assert "at most" in (password_problem("x" * 2000) or "")


def test_a_flood_is_refused_without_counting_and_the_window_frees_the_user() -> None:
    clock = [0.0]
    limiter = SignInLimiter(max_failures=3, max_address_failures=5, window=10,
                            clock=lambda: clock[0])
    for _ in range(3):
        assert limiter.locked("ann", "a1") == 0
        limiter.failed("ann", "a1")
        clock[0] += 1
    assert limiter.locked("ann", "a1") > 0
    # another user from another address is not locked out by ann's failures
    assert limiter.locked("bob", "a2") == 0
    # a thousand refused tries do not push the end of the lockout further
    for _ in range(1000):
        assert limiter.locked("ann", "a1") > 0
    clock[0] = 2 + 10  # the window since the last counted failure (at t=2)
    assert limiter.locked("ann", "a1") == 0
    limiter.succeeded("ann")
    assert limiter.locked("ann", "a1") == 0


def test_one_address_trying_many_names_is_limited_too() -> None:
    limiter = SignInLimiter(max_failures=3, max_address_failures=5, window=10,
                            clock=lambda: 0.0)
    for n in range(5):
        limiter.failed(f"user{n}", "10.0.0.9")
    assert limiter.locked("someone-else", "10.0.0.9") > 0
    assert limiter.locked("someone-else", "10.0.0.8") == 0


def test_memory_stays_bounded() -> None:
    limiter = SignInLimiter(clock=lambda: 0.0)
    limiter.MAX_KEYS = 100
    for n in range(1000):
        limiter.failed(f"u{n}", f"addr{n}")
    assert len(limiter._fails) <= 100
