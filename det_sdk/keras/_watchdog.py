"""A bound on det_sdk's collectives under Horovod, and what each process was doing.

det_sdk's collectives (metrics, the divergence check, stop agreement, moving
statistics, checkpoints' random states) run at points every process reaches. When
one process takes another path (a script that calls one collective more on one
rank, a step one process skips), the others would wait forever: Horovod has no
timeout, and its stall inspector (``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``) did not end
such a wait here (Horovod 0.28.1, Gloo). :class:`Watchdog` bounds it:

- it notes each det_sdk collective this process enters: its name and the det_sdk
  code (or script line) that called it;
- a daemon thread looks once a second. When this process's collective has waited
  half the bound (``DET_COLLECTIVE_TIMEOUT``, default :data:`DEFAULT_TIMEOUT_S`) it says
  so in Horovod's rendezvous store (``horovodrun --gloo``'s key-value store), and every
  process's thread answers there with where its main thread is: the collective it
  waits in, or its Python stack (the training step, the script). TensorFlow releases
  the GIL while an op waits, so the thread runs beside a blocked collective;
- at the bound it shuts Horovod down (``hvd.shutdown()``): Horovod agrees a shutdown
  across processes, so every process's pending collective fails at once, det_sdk's
  and the training step's alike. The det_sdk collective that failed raises
  :class:`~det_sdk.errors.CollectiveTimeoutError` with every process's answer, and
  ``horovodrun`` ends the processes when the first exits with an error. (Such a process
  can then hang in its exit: it leaves with ``os._exit(1)`` instead.)

>>> collective_timeout({})
300.0
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from det_sdk.env import setting
from det_sdk.errors import CollectiveTimeoutError, UsageError

__all__ = ["DEFAULT_TIMEOUT_S", "Watchdog", "collective_site", "collective_timeout"]

log = logging.getLogger("det_sdk.keras")

#: Seconds a det_sdk collective may wait for the other processes. Long enough for what
#: one process may legitimately do alone between two collectives (the chief's
#: reports, a slow first trace, a skewed validation part); short enough that a run
#: gone astray ends within minutes, not at gloo's 30-minute default.
DEFAULT_TIMEOUT_S = 300.0
_TIMEOUT_VAR = "DET_COLLECTIVE_TIMEOUT"
_SCOPE = "det_sdk_watchdog"
_POLL_S = 1.0  # how often each process looks for a stalled collective in the store
_ANSWER_S = 5.0  # how long a failed collective waits for the others' answers
# det_sdk's own plumbing between a caller and Horovod: not "where" it was called from
_LIBRARIES = ("tensorflow", "keras", "tf_keras", "horovod")
_PLUMBING = ("det_sdk/keras/_watchdog.py", "det_sdk/keras/_horovod.py", "det_sdk/distributed.py",
             "contextlib.py")


def collective_timeout(environ: Mapping[str, str] | None = None) -> float:
    """``DET_COLLECTIVE_TIMEOUT`` in seconds (default :data:`DEFAULT_TIMEOUT_S`; 0: no bound).

    >>> collective_timeout({"DET_COLLECTIVE_TIMEOUT": "30"})
    30.0
    """
    raw = setting(_TIMEOUT_VAR, environ)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise UsageError(f"{_TIMEOUT_VAR} must be a number of seconds >= 0 (0: no bound), "
                         f"got {raw!r}")
    return value


def _frame_text(code: Any, lineno: int | None) -> str:
    name = getattr(code, "co_qualname", code.co_name)
    return f"{name} ({os.path.basename(code.co_filename)}:{lineno})"


def _callers(frame: Any, depth: int = 3) -> str:
    """The ``depth`` innermost frames from ``frame`` out, det_sdk's plumbing left out."""
    found: list[str] = []
    while frame is not None and len(found) < depth:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        if not path.endswith(_PLUMBING):
            found.append(_frame_text(frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return " < ".join(found) or "?"


def collective_site(frame: Any) -> str:
    """Who called a det_sdk collective, comparable across processes: det_sdk's function
    (by name, not line: a function may call from the chief's branch and the others'), or
    ``"the script"`` for any other caller (a script's own calls may legitimately come
    from different lines on different ranks). Processes whose sites differ met in one
    collective from different calls: one called one more than the others.

    >>> import sys
    >>> collective_site(sys._getframe())
    'the script'
    """
    while frame is not None:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        if not path.endswith(_PLUMBING):
            if "/det_sdk/" not in path:
                return "the script"
            code = frame.f_code
            return f"det_sdk's {getattr(code, 'co_qualname', code.co_name)} " \
                   f"({os.path.basename(code.co_filename)})"
        frame = frame.f_back
    return "the script"


def _in_library(path: str) -> bool:
    """Whether ``path`` is TensorFlow's, Keras's or Horovod's code (not det_sdk's).

    >>> _in_library("/v/keras/src/trainer.py"), _in_library("/w/det_sdk/keras/_fit.py")
    (True, False)
    """
    path = path.replace(os.sep, "/")
    return "/det_sdk/" not in path and any(f"/{lib}/" in path for lib in _LIBRARIES)


def _stack_of(thread: threading.Thread, depth: int = 3) -> str:
    """Where ``thread`` is now (also while it waits in TensorFlow, which releases the GIL):
    its innermost frames outside TensorFlow's, Keras's and Horovod's own code."""
    frame = sys._current_frames().get(thread.ident or -1)
    inside = False
    while frame is not None and _in_library(frame.f_code.co_filename):
        inside, frame = True, frame.f_back
    if frame is None:
        return "?"
    text = _callers(frame, depth)
    return f"TensorFlow/Keras (a training step, or fit's loop), called from {text}" if inside \
        else text


class _Store:
    """Horovod's rendezvous key-value store (``horovodrun --gloo``), over HTTP."""

    def __init__(self, addr: str, port: str) -> None:
        self.base = f"http://{addr}:{port}/{_SCOPE}"

    def put(self, key: str, value: Any) -> None:
        req = urllib.request.Request(f"{self.base}/{key}", data=json.dumps(value).encode(),
                                     method="PUT")
        with urllib.request.urlopen(req, timeout=5):
            pass

    def get(self, key: str) -> Any:
        try:
            with urllib.request.urlopen(f"{self.base}/{key}", timeout=5) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise


class Watchdog:
    """Where this process is among det_sdk's collectives, and the others' answers when one
    stalls. ``store`` is ``(address, port)`` of the rendezvous store (None: this process
    can say only where it was itself).

    >>> w = Watchdog(rank=0, size=1, timeout_s=0, store=None)
    >>> with w.collective("det_sdk.allgather.1"):
    ...     "in" in w.place()
    True
    """

    def __init__(self, rank: int, size: int, timeout_s: float,
                 store: tuple[str, str] | None, shutdown: Callable[[], None] | None = None
                 ) -> None:
        self.rank, self.size, self.timeout_s = rank, size, timeout_s
        self._store = _Store(*store) if store is not None else None
        self._shutdown = shutdown
        self._main = threading.current_thread()
        self._pending: tuple[str, str, float] | None = None  # (name, callers, since)
        self._last = "none yet"
        self._answered: Any = None  # the stall this process last answered
        self._raised: set[str] = set()  # stalls this process raised in the store
        self._ended = False  # Horovod was shut down: no collective can run any more
        if size > 1 and timeout_s:
            threading.Thread(target=self._watch, name="det_sdk-watchdog", daemon=True).start()

    @contextmanager
    def collective(self, name: str) -> Iterator[None]:
        """Around one det_sdk collective: notes where it was called from; Horovod's
        shutdown (this watchdog's, or another process's) becomes
        :class:`CollectiveTimeoutError`."""
        callers = _callers(sys._getframe(1))
        self._pending = (name, callers, time.monotonic())
        try:
            yield
        except Exception as err:
            if "shut down" not in str(err):  # Horovod's: "Horovod has been shut down"
                raise
            self._ended = True
            raise self._timeout_error(name, callers) from err
        finally:
            self._pending = None
            self._last = f"{name} from {callers}"

    def place(self) -> str:
        """What this process is doing now, in words."""
        pending = self._pending
        if pending is not None:
            name, callers, since = pending
            return (f"waiting in det_sdk's collective {name} for "
                    f"{time.monotonic() - since:.0f} s, called from {callers}")
        return (f"not in a det_sdk collective: in {_stack_of(self._main)} (its last det_sdk "
                f"collective: {self._last})")

    def exit_if_ended(self) -> None:
        """End the process at once (status 1) if Horovod was shut down under a collective:
        such a process can hang in its exit (measured here, on either rank). For
        ``atexit``, registered after ``hvd.init()``'s own so that it runs first."""
        if self._ended:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    # --- the others' answers ---------------------------------------------------------------

    def _watch(self) -> None:
        while not self._ended:
            time.sleep(_POLL_S)
            pending = self._pending
            waited = time.monotonic() - pending[2] if pending is not None else 0.0
            if self._store is not None:
                try:
                    self._exchange(self._store, pending, waited)
                except Exception as err:  # the store gone (the run ending): nothing to say
                    log.debug("det_sdk watchdog: %s", err)
                    self._store = None
            if pending is not None and waited > self.timeout_s and self._shutdown is not None:
                # the others' places first, while they are still there: the shutdown
                # moves them (a rank blocked in its step's allreduce returns from it)
                self._await_answers()
                # Ends every process's pending Horovod collective (theirs too: Horovod
                # agrees its shutdown across processes); the one here then raises.
                log.error("det_sdk: %s waited %.0f s (DET_COLLECTIVE_TIMEOUT=%g): ending the "
                          "collectives", pending[0], waited, self.timeout_s)
                self._ended = True
                self._shutdown()

    def _await_answers(self) -> None:
        """Wait (at most :data:`_ANSWER_S`) until every other process has answered the
        stall in the store. Under load a process's watchdog can answer late; answered
        after the shutdown, it would describe where the shutdown moved it (measured: a
        test's rank 0 answered "?", its thread already gone)."""
        store = self._store
        deadline = time.monotonic() + _ANSWER_S
        while store is not None and time.monotonic() < deadline:
            try:
                if all(store.get(f"place.{r}") is not None
                       for r in range(self.size) if r != self.rank):
                    return
            except OSError:
                return
            time.sleep(0.2)

    def _exchange(self, store: _Store, pending: tuple[str, str, float] | None,
                  waited: float) -> None:
        """Say in the store that this process's collective stalls (from half the bound,
        so the others answer before it ends); answer a stall any process announced."""
        if (pending is not None and pending[0] not in self._raised
                and waited > self.timeout_s / 2):
            self._raised.add(pending[0])
            store.put("stall", {"rank": self.rank, "collective": pending[0]})
        stall = store.get("stall")
        if stall is not None and stall != self._answered:
            self._answered = stall
            store.put(f"place.{self.rank}", self.place())

    def _timeout_error(self, name: str, callers: str) -> CollectiveTimeoutError:
        places = {self.rank: f"waiting in det_sdk's collective {name}, called from {callers}"}
        if self._store is not None:
            deadline = time.monotonic() + _ANSWER_S
            while len(places) < self.size and time.monotonic() < deadline:
                for r in range(self.size):
                    if r not in places:
                        try:
                            answer = self._store.get(f"place.{r}")
                        except OSError:
                            answer = None
                        if answer is not None:
                            places[r] = answer
                if len(places) < self.size:
                    time.sleep(0.2)
        lines = "\n".join(f"  rank {r}: {places.get(r, 'did not answer')}"
                          for r in range(self.size))
        return CollectiveTimeoutError(
            f"det_sdk: a collective did not complete within DET_COLLECTIVE_TIMEOUT="
            f"{self.timeout_s:g} s: the {self.size} processes took different paths, so "
            f"some wait for a collective others never reach. Where each process was:\n"
            f"{lines}\nEvery process must call det_sdk's collectives (context.fit, "
            "evaluate, distributed.allgather/broadcast, ...) in the same order; with "
            "mixed precision, let det_sdk wrap the optimizer (context.wrap_optimizer).")
