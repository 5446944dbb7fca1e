"""Argument types the ``det`` parsers share (argparse ``type=``)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["whole_number"]


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``, else argparse's usage
    error saying what was expected.

    >>> whole_number(1)("3")
    3
    >>> whole_number(0)("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be at least 0, got -1
    """
    def parse(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse
