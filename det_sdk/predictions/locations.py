"""Where a streamed predict's ``output=`` is: an object-store URL (:func:`output_url`)
or a directory (:func:`resolve_output`: relative paths under the task's kept files)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from det_sdk.errors import UsageError

__all__ = ["output_url", "resolve_output"]

#: the object-store URLs an ``output=`` may be (a ``pathlib.Path`` of one has lost a slash:
#: ``s3:/bucket``; it is a URL all the same, never a folder named ``s3:``)
_URL = re.compile(r"^(s3|gs|az):/+(.*)$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def output_url(output: str | os.PathLike[str]) -> str | None:
    """``output`` as an object-store URL (``s3://bucket/prefix``, ``gs://``, ``az://``);
    None when it is a path. Another scheme (``http://``, ``file://``) is refused.

    >>> output_url("s3://preds/job-1/"), output_url(Path("gs://b/p")), output_url("out")
    ('s3://preds/job-1', 'gs://b/p', None)
    """
    text = os.fspath(output)
    m = _URL.match(text)
    if m is None:
        if _SCHEME.match(text):
            raise UsageError(f"predict: output={text!r} is not a path nor an s3://, gs:// or "
                             "az:// URL (bucket/prefix)")
        return None
    where = m.group(2).strip("/")
    if not where.split("/", 1)[0]:
        raise UsageError(f"predict: output={text!r} names no bucket: write "
                         f"{m.group(1)}://<bucket>/<prefix>")
    return f"{m.group(1)}://{where}"


def resolve_output(core: Any, output: str | os.PathLike[str]) -> Path | str:
    """Where ``output`` is: an object-store URL as it is (normalized: :func:`output_url`);
    absolute paths as given; relative ones under the trial's kept files
    (``<host_path>/trial_files/<experiment>/trial_<id>``) on the cluster, under
    ``<host_path>/job_files/<allocation>`` in a generic job, the working directory
    locally. ``core``: the task's ``det_sdk.core.Context``."""
    url = output_url(output)
    if url is not None:
        return url
    path = Path(output).expanduser()
    if path.is_absolute():
        return path
    if core.files_dir is not None:
        return Path(core.files_dir) / path
    info = core.info if core.local_run_dir is None else None  # a local run's is no cluster's
    host_path = ((getattr(info, "config", None) or {}).get("checkpoint_storage") or {}).get(
        "host_path") if info is not None else None
    if host_path and info is not None:
        return Path(host_path) / "job_files" / str(info.allocation_id) / path
    return Path.cwd() / path
