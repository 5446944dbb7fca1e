"""The collectives of processes launched by ``horovodrun``, over Horovod's TensorFlow
binding: the Keras front's (it loads TensorFlow). det.core reaches it by name
(``det_sdk.distributed.FRONT_BUILDERS["horovod"]``) and never imports it.

>>> issubclass(HorovodProcesses, Processes)
True
"""

from __future__ import annotations

import atexit
import sys
from typing import Any, TypeVar

import numpy as np
import tensorflow as tf

from det_sdk.core._distributed import DistributedContext
from det_sdk.distributed import Processes
from det_sdk.errors import CollectiveMismatchError
from det_sdk.keras._compat._share import scaled
from det_sdk.keras._watchdog import Watchdog, collective_site, collective_timeout
from det_sdk.ranks import horovodrun

__all__ = ["SKIP_WEIGHTING_FROM", "HorovodProcesses"]

T = TypeVar("T")

#: From this many gradient values a step asks the processes whether their rows are alike
#: and, if so, skips the weighted average's two passes over the gradients; below it the
#: passes cost less than the question, one more collective in every step
#: (scripts/bench/weighted_average.py, docs/benchmarks.md).
SKIP_WEIGHTING_FROM = 1 << 20


class HorovodProcesses(Processes):
    """One of N processes launched by ``horovodrun``; collectives go through Horovod.

    Horovod's TensorFlow binding loads TensorFlow, so this lives in the Keras front;
    det.core builds it through ``det_sdk.distributed.front_builder("horovod")``.
    """

    def __init__(self, timeout_s: float | None = None) -> None:
        """``timeout_s``: how long a collective may wait for the other processes
        (default ``DET_COLLECTIVE_TIMEOUT``, 300 s; 0: no bound; see :mod:`._watchdog`)."""
        # imported here: a script on one process never loads Horovod (nor needs it)
        import horovod.tensorflow as hvd

        bound = collective_timeout() if timeout_s is None else timeout_s
        hvd.init()
        self._hvd = hvd
        self.rank, self.size = hvd.rank(), hvd.size()
        self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
        self.cross_rank, self.cross_size = hvd.cross_rank(), hvd.cross_size()
        self._calls = 0
        self.watchdog = Watchdog(self.rank, self.size, bound, horovodrun.gloo_rendezvous(),
                                 shutdown=hvd.shutdown)
        atexit.register(self.watchdog.exit_if_ended)  # after Horovod's: runs before it

    def _name(self, what: str) -> str:
        # Horovod matches collectives across processes by name: a per-call counter
        # keeps concurrent names distinct and identical on every rank.
        self._calls += 1
        return f"det_sdk.{what}.{self._calls}"

    def allgather(self, obj: T) -> list[T]:
        name = self._name("allgather")
        return self._matched(name, collective_site(sys._getframe(1)), obj)

    def broadcast(self, obj: T, root: int = 0) -> T:
        # an allgather with the others' objects left out: every process sees every
        # caller (a broadcast would tell only the receivers), at a broadcast's cost for
        # the small objects det_sdk sends
        name = self._name("broadcast")
        site = collective_site(sys._getframe(1))
        return self._matched(name, site, obj if self.rank == root else None)[root]

    def _matched(self, name: str, site: str, obj: Any) -> list[Any]:
        """Every process's ``obj``, after checking that every process called from the same
        place: Horovod pairs collectives by order, so one process's extra allgather would
        otherwise meet another's next one and exchange the wrong objects, silently."""
        with self.watchdog.collective(name):
            got = list(self._hvd.allgather_object((site, obj), name=name))
        sites = [s for s, _ in got]
        if any(s != site for s in sites):
            where = "; ".join(f"rank {r} from {s}" for r, s in enumerate(sites))
            raise CollectiveMismatchError(
                f"det_sdk: the processes met in one collective ({name}) from different "
                f"calls: {where}. One process called one more det_sdk collective (or one "
                "fewer) than the others. Every process must make the same "
                "context.distributed calls in the same order: call them on every rank, not "
                "under `if context.distributed.rank == ...`")
        return [o for _, o in got]

    def gather_arrays(self, arr: Any) -> Any:
        # allgather concatenates along the first axis and accepts different row
        # counts per rank: no pickling of the arrays.
        name = self._name("gather_arrays")
        with self.watchdog.collective(name):
            return self._hvd.allgather(arr, name=name).numpy()

    def any(self, flag: bool) -> bool:
        # One float allreduce: ~1 ms, against ~4 ms for an allgather of objects.
        name = self._name("any")
        with self.watchdog.collective(name):
            total = self._hvd.allreduce(np.float32(1.0 if flag else 0.0), op=self._hvd.Sum,
                                        name=name)
        return float(total) > 0

    def average_gradients(self, grads: list[Any], compression: str | None = None,
                          weight: Any = None) -> list[Any]:
        # Horovod's plain TF ops, not its Keras wrappers (which average nothing on
        # Keras 3). ``grads`` are this process's own; ``weight`` its weight in their
        # average (the rows of its batch).
        w = None if weight is None else tf.cast(weight, tf.float32)
        dense = [i for i, g in enumerate(grads) if g is not None]
        if (w is None or not dense
                or any(isinstance(grads[i], tf.IndexedSlices) for i in dense)
                or sum(_values(grads[i]) for i in dense) < SKIP_WEIGHTING_FROM):
            return self._weighted(grads, compression, w)
        return self._alike_or_weighted(grads, dense, compression, w)

    def _alike_or_weighted(self, grads: list[Any], dense: list[int],
                           compression: str | None, w: Any) -> list[Any]:
        """The plain average where every process has the same weight, else the weighted.

        Every full global batch gives each process the same rows: the weighted average is
        then the plain one, and its two passes over the gradients (times the weight, then
        divided by the mean weight) can be skipped. One small collective of the weights'
        largest and smallest (the smallest as the largest of its negation) decides the
        branch alike on every process; it needs no gradient, so TensorFlow may run it
        before the backward pass ends. Where the rows are a power of two both branches
        give the same bits."""
        hvd = self._hvd
        top, neg_bottom = hvd.grouped_allreduce(
            [tf.reshape(w, [1]), tf.reshape(-w, [1])], op=hvd.Max)
        alike = tf.logical_and(tf.equal(top[0], -neg_bottom[0]), top[0] > 0.0)
        tensors = [grads[i] for i in dense]
        chosen = tf.cond(alike, lambda: self._weighted(tensors, compression, None),
                         lambda: self._weighted(tensors, compression, w))
        out = list(grads)
        for i, g in zip(dense, chosen):
            out[i] = g
        return out

    def _weighted(self, grads: list[Any], compression: str | None,
                  w: Any) -> list[Any]:
        """``sum(w_i g_i) / sum(w_i)`` over the processes (``w`` None: the plain average).
        Dense gradients go in one grouped allreduce (one fused collective per step), the
        weight with them (uncompressed: float16 holds integers exactly only up to 2048);
        sparse ones (embeddings) are gathered each."""
        hvd = self._hvd
        if w is not None:
            grads = [scaled(g, w) for g in grads]
        out = list(grads)
        dense = [i for i, g in enumerate(grads)
                 if g is not None and not isinstance(g, tf.IndexedSlices)]
        tensors = [grads[i] for i in dense]
        weighted = w is not None and compression is None
        if weighted:
            tensors.append(tf.reshape(w, [1]))
        if tensors:
            averaged = hvd.grouped_allreduce(
                tensors, op=hvd.Average,
                compression=hvd.Compression.fp16 if compression == "fp16"
                else hvd.Compression.none)
            for i, g in zip(dense, averaged):
                out[i] = g
        mean_weight = None
        if w is not None:
            # sum(w_i g_i) / sum(w_i), as the mean of w_i g_i over the mean of w_i
            mean_weight = (averaged[-1][0] if weighted else hvd.allreduce(w, op=hvd.Average))
        for i, g in enumerate(grads):
            if isinstance(g, tf.IndexedSlices):
                out[i] = self._average_slices(g)
        if mean_weight is None:
            return out
        return [_divided(g, mean_weight) for g in out]

    def _average_slices(self, g: tf.IndexedSlices) -> tf.IndexedSlices:
        """The average of a sparse gradient, with the rows one process would have.

        Horovod gathers every process's rows (each divided by N). Where the processes'
        rows stand for different lookups (token ids), those are one process's rows.
        Where every process has the same indices in the same order (a lookup of
        ``arange(maxlen)`` broadcast over the batch: a position embedding), one process
        has one row per index, summed over its whole batch: the gathered rows are
        summed back per index. Keras 3's optimizers do not add up duplicate indices
        before their non-linear updates (Adam squares each row), so N rows for one
        index made Adam's velocity differ from one process's (a model with a position
        embedding, 24 steps on 2 processes: weights 5.6e-05 apart, 7.5e-09 now).
        Token ids alike on every process, in the same order, would be summed too."""
        hvd = self._hvd
        gathered = hvd.allreduce(g, op=hvd.Average)  # allgather, rows divided by N
        sizes = hvd.allgather(tf.reshape(tf.shape(g.indices, out_type=tf.int64)[0], [1]))
        size = self.size

        def summed() -> tf.IndexedSlices:
            indices = tf.reshape(gathered.indices, [size, -1])
            same = tf.reduce_all(tf.equal(indices, indices[:1]))
            rows = tf.reshape(gathered.values,
                              tf.concat([[size, -1], tf.shape(g.values)[1:]], 0))
            return tf.cond(
                same,
                lambda: tf.IndexedSlices(tf.reduce_sum(rows, 0), indices[0], g.dense_shape),
                lambda: gathered)

        return tf.cond(tf.reduce_all(tf.equal(sizes, sizes[0])), summed, lambda: gathered)

    def broadcast_variables(self, variables: list[Any], root: int = 0) -> None:
        if variables:
            with self.watchdog.collective("det_sdk.broadcast_variables"):
                self._hvd.broadcast_variables(variables, root_rank=root)

    def __repr__(self) -> str:
        return f"HorovodProcesses(rank={self.rank}, size={self.size})"


# det.core's public class counts it among its own for isinstance, as SingleProcess
DistributedContext.register(HorovodProcesses)


def _values(g: Any) -> int:
    """How many values a dense gradient holds (0 where its shape is not known: such a
    step keeps the weighted average)."""
    return g.shape.num_elements() or 0


def _divided(g: Any, by: Any) -> Any:
    """``g`` divided by ``by`` (0 where ``by`` is 0: no process had a row)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(tf.math.divide_no_nan(g.values, tf.cast(by, g.values.dtype)),
                                g.indices, g.dense_shape)
    return tf.math.divide_no_nan(g, tf.cast(by, g.dtype))
