"""det_sdk.storage._objects' download pieces that need no server: the digest taken while
ranges land in any order, and the coroutine runner that must work under a running event
loop (the store's own downloads: tests/e2e/test_object_stores.py, against real servers)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from pathlib import Path

from det_sdk.storage._objects import _Digest, _run_coroutine


def test_ranges_landing_out_of_order_give_the_files_sha256(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 + 17)
    path = tmp_path / "f.bin"
    path.write_bytes(b"\0" * len(data))  # sized first, as the download does
    ranges = [(s, min(s + 500, len(data))) for s in range(0, len(data), 500)]
    random.Random(3).shuffle(ranges)
    fd = os.open(path, os.O_RDWR)
    try:
        digest = _Digest(fd)

        async def land_all() -> None:
            async def land(start: int, end: int) -> None:
                await asyncio.sleep(random.random() / 100)
                os.pwrite(fd, data[start:end], start)
                await digest.landed(start, end)
            await asyncio.gather(*(land(s, e) for s, e in ranges))

        asyncio.run(land_all())
    finally:
        os.close(fd)
    assert digest.hashed == len(data)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_flipped_byte_changes_the_digest(tmp_path: Path) -> None:
    data = bytearray(os.urandom(1000))
    path = tmp_path / "f.bin"
    data[700] ^= 1
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDWR)
    try:
        digest = _Digest(fd)
        asyncio.run(digest.landed(0, 1000))
    finally:
        os.close(fd)
    data[700] ^= 1
    assert digest.hexdigest() != hashlib.sha256(bytes(data)).hexdigest()


def test_the_runner_works_inside_a_running_event_loop() -> None:
    seen: list[int] = []

    async def work() -> None:
        await asyncio.sleep(0)
        seen.append(1)

    async def caller() -> None:  # as from an async web handler calling a sync download
        _run_coroutine(work)

    _run_coroutine(work)
    asyncio.run(caller())
    assert seen == [1, 1]
