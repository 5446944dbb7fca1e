"""Which S3 client moves checkpoints: boto3's TransferManager (Determined's choice) against
obstore (Rust's object_store; one client for S3, GCS and Azure), side by side.

A checkpoint-shaped folder (one large weights file, a few medium ones, small metadata)
is uploaded to and downloaded from a real S3 server (SeaweedFS, started here in a
temporary folder), by each client in turn, alternating, ``--rounds`` times. Each client
moves every file at once with ``--threads`` parallel transfers (multipart parts of 8 MiB
for the large file). Prints each round's seconds and the ratios obstore / boto3 of
throughput (> 1: obstore faster), and of the client's own CPU seconds (the server's
excluded: it runs in its own process).

A third mover, ``det_sdk``, is the real thing: ``S3Storage.upload`` (digests, the
pending mark, the manifest) and ``S3Storage.download`` (every file verified against
the manifest). The goal is judged on it; raw ``obstore`` shows what the client alone does.

    python scripts/bench/bench_s3_client.py --mb 300 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.seaweedfs import SeaweedFS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_time import own_cpu

PART = 8 << 20


def make_checkpoint(folder: Path, total_mb: int) -> list[Path]:
    """70% in one file, 25% in five, the rest small: a Keras checkpoint's shape."""
    folder.mkdir(parents=True)
    total = total_mb << 20
    sizes = [int(total * 0.7)] + [int(total * 0.05)] * 5 + [4096] * 4
    files = []
    for i, size in enumerate(sizes):
        path = folder / f"part-{i}.bin"
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, 16 << 20)
                f.write(os.urandom(n))
                left -= n
        files.append(path)
    return files


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def boto3_mover(s3: SeaweedFS, bucket: str, threads: int) -> tuple[Callable, Callable]:
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config
    from s3transfer.manager import TransferManager

    client = boto3.client("s3", endpoint_url=s3.endpoint_url, aws_access_key_id=s3.access_key,
                          aws_secret_access_key=s3.secret_key, region_name="us-east-1",
                          config=Config(max_pool_connections=threads + 2))
    config = TransferConfig(max_concurrency=threads, multipart_chunksize=PART,
                            multipart_threshold=PART)

    def upload(files: list[Path], prefix: str) -> None:
        with TransferManager(client, config) as manager:
            futures = [manager.upload(str(f), bucket, f"{prefix}/{f.name}") for f in files]
            for fut in futures:
                fut.result()

    def download(names: list[str], prefix: str, dest: Path) -> None:
        with TransferManager(client, config) as manager:
            futures = [manager.download(bucket, f"{prefix}/{n}", str(dest / n)) for n in names]
            for fut in futures:
                fut.result()

    return upload, download


def obstore_mover(s3: SeaweedFS, bucket: str, threads: int) -> tuple[Callable, Callable]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=s3.endpoint_url, access_key_id=s3.access_key,
                    secret_access_key=s3.secret_key, region="us-east-1",
                    client_options={"allow_http": True})

    def upload(files: list[Path], prefix: str) -> None:
        async def all_files() -> None:
            sem = asyncio.Semaphore(threads)

            async def one(f: Path) -> None:
                async with sem:
                    await obstore.put_async(store, f"{prefix}/{f.name}", f, chunk_size=PART,
                                            max_concurrency=threads)
            await asyncio.gather(*(one(f) for f in files))
        asyncio.run(all_files())

    def download(names: list[str], prefix: str, dest: Path) -> None:
        # as ObjectStoreStorage.download: ranges of PART bytes, ``threads`` at a time over
        # all files, each written in place through its file's one descriptor
        jobs: list[tuple[str, int, int]] = []
        fds: dict[str, int] = {}
        try:
            for n in names:
                size = obstore.head(store, f"{prefix}/{n}")["size"]
                fds[n] = os.open(dest / n, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                os.ftruncate(fds[n], size)
                jobs += [(n, start, min(start + PART, size)) for start in range(0, size, PART)]

            def fetch(job: tuple[str, int, int]) -> None:
                n, start, end = job
                view = memoryview(obstore.get_range(store, f"{prefix}/{n}", start=start,
                                                    end=end))
                while view:
                    done = os.pwrite(fds[n], view, start)
                    view, start = view[done:], start + done

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(fetch, jobs))
        finally:
            for fd in fds.values():
                os.close(fd)

    return upload, download


def detsdk_mover(s3: SeaweedFS, bucket: str) -> tuple[Callable, Callable]:
    """det_sdk's own S3 checkpoint storage: what a training's save and restore do."""
    import uuid as uuidlib

    from det_sdk.storage.s3 import S3Storage

    storage = S3Storage(bucket, "det", endpoint_url=s3.endpoint_url, access_key=s3.access_key,
                        secret_key=s3.secret_key, owner={})
    uuids: dict[str, str] = {}

    def upload(files: list[Path], prefix: str) -> None:
        uuids[prefix] = str(uuidlib.uuid4())
        storage.upload(uuids[prefix], files[0].parent)

    def download(names: list[str], prefix: str, dest: Path) -> None:
        storage.download(uuids[prefix], dest)

    return upload, download


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="checkpoint size in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--goal", type=float, default=0.9,
                        help="least throughput obstore/boto3, up and down (issue 47)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp, SeaweedFS(Path(tmp) / "s3") as s3:
        s3.create_bucket("bench")
        files = make_checkpoint(Path(tmp) / "ckpt", args.mb)
        names = [f.name for f in files]
        want = {f.name: digest(f) for f in files}
        movers = {"boto3": boto3_mover(s3, "bench", args.threads),
                  "obstore": obstore_mover(s3, "bench", args.threads),
                  "det_sdk": detsdk_mover(s3, "bench")}
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            order = list(movers)[r % len(movers):] + list(movers)[:r % len(movers)]  # rotate
            for name in order:
                upload, download = movers[name]
                prefix = f"{name}-{r}"
                t, cpu = time.perf_counter(), own_cpu()
                upload(files, prefix)
                up, up_cpu = time.perf_counter() - t, own_cpu() - cpu
                dest = Path(tmp) / prefix
                dest.mkdir()
                t, cpu = time.perf_counter(), own_cpu()
                download(names, prefix, dest)
                down, down_cpu = time.perf_counter() - t, own_cpu() - cpu
                assert {n: digest(dest / n) for n in names} == want, f"{name}: files differ"
                times.setdefault((name, "upload"), []).append(up)
                times.setdefault((name, "download"), []).append(down)
                times.setdefault((name, "upload cpu"), []).append(up_cpu)
                times.setdefault((name, "download cpu"), []).append(down_cpu)
                print(f"round {r} {name:8s} upload {up:6.2f} s ({args.mb / up:6.1f} MiB/s, "
                      f"client CPU {up_cpu:5.2f} s)  download {down:6.2f} s "
                      f"({args.mb / down:6.1f} MiB/s, client CPU {down_cpu:5.2f} s)", flush=True)
                for n in names:
                    (dest / n).unlink()
        missed = []
        for way in ("upload", "download"):
            b = statistics.median(times[("boto3", way)])
            b_cpu = statistics.median(times[("boto3", f"{way} cpu")])
            for name in ("obstore", "det_sdk"):
                o = statistics.median(times[(name, way)])
                o_cpu = statistics.median(times[(name, f"{way} cpu")])
                print(f"{way}: median boto3 {b:.2f} s, {name} {o:.2f} s; throughput "
                      f"{name}/boto3 = {b / o:.3f}; client CPU {name}/boto3 = "
                      f"{o_cpu / b_cpu:.3f} ({o_cpu:.2f} s against {b_cpu:.2f} s)")
                if name == "det_sdk" and b / o < args.goal:
                    missed.append(f"{way} {b / o:.3f}")
    print(f"MISSED (goal >= {args.goal}): {', '.join(missed)}" if missed
          else f"OK: both ways >= {args.goal}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
