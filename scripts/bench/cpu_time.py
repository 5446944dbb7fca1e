"""CPU seconds for the benches' side-by-side figures: this process's and another's.

>>> own_cpu() > 0
True
>>> import os
>>> process_cpu(os.getpid()) >= 0
True
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def own_cpu() -> float:
    """CPU seconds of this process (every thread: Python's, TensorFlow's, obstore's)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds another process has used so far (user + system, from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
