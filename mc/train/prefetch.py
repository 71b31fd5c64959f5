"""Stage-2 host work ahead of time: the next micro-steps' batches and plans, made in a background thread.

Owns :class:`PlanPrefetcher`. A stage-2 micro-step's host half (the data batch, the variant
sampler, the gather tables and LOD maps: :meth:`mc.controller.MCController.prepare_step`) costs
tens of milliseconds of Python at the ``h100`` geometry. Done inline it sits on the critical path:
the device idles while Python samples. Here a daemon thread runs it ``depth`` micro-steps ahead
while the main thread launches the current micro-step's device work, which never waits on the
host (obsidian "Training": host/device split).

Determinism: the thread is the only user of the data generator while the prefetcher is open, and
it draws exactly the sequence the inline loop draws (batch, then variants, micro-step after
micro-step), so losses are bit-identical with ``depth=0`` (inline) for the same seed. A
checkpoint must record the generator as it was after the last *consumed* plan, not after the ones
made ahead: :meth:`consumed_generator` gives that state, so a resumed run continues exactly.
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Callable

import torch

from mc.step_plan import StepPlan

_POLL_S = 0.1  # how often a blocked producer / consumer checks that the other side is still there


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _produce(make: Callable[[], StepPlan], gen: torch.Generator, q: queue.Queue, stop: threading.Event) -> None:
    """The thread body. Holds no reference to the prefetcher, so dropping it (an exception in the
    training loop) lets its finalizer stop this thread."""
    try:
        while not stop.is_set():
            item = (make(), gen.get_state())
            while not stop.is_set():
                try:
                    q.put(item, timeout=_POLL_S)
                    break
                except queue.Full:
                    continue
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
        while not stop.is_set():
            try:
                q.put(_Failure(exc), timeout=_POLL_S)
                return
            except queue.Full:
                continue


def prefetch_depth(setting: int, device: torch.device) -> int:
    """``train.prefetch`` for ``device``: the setting itself when >= 0; for -1, 2 on CUDA and 0 elsewhere. On a CPU
    device the "device work" is the main thread's own compute, so a producer thread does not overlap it: it takes
    cores (and the GIL) from it (obsidian "Training", "Host/device split")."""
    if setting >= 0:
        return setting
    return 2 if device.type == "cuda" else 0


class PlanPrefetcher:
    """``next()`` returns the plan of the next micro-step; ``depth`` plans are made ahead (0 = inline).

    ``make()`` draws one micro-step's batch and plan from ``generator`` (and nothing else may use
    the generator while the prefetcher is open). ``waits`` records, per ``next()``, the seconds the
    caller spent waiting for host work: the whole ``make()`` inline, the queue wait when prefetching.
    """

    def __init__(self, make: Callable[[], StepPlan], generator: torch.Generator, *, depth: int) -> None:
        if not isinstance(depth, int) or depth < 0:
            raise ValueError(f"PlanPrefetcher depth must be an integer >= 0 (0 = inline), got {depth!r}")
        self.make, self.generator, self.depth = make, generator, depth
        self.waits: list[float] = []
        self._consumed = generator.get_state()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if depth:
            self._q: queue.Queue = queue.Queue(maxsize=depth)
            self._thread = threading.Thread(target=_produce, args=(make, generator, self._q, self._stop),
                                            name="mc-stage2-prefetch", daemon=True)
            self._thread.start()
            weakref.finalize(self, self._stop.set)

    def next(self) -> StepPlan:
        t0 = time.perf_counter()
        if self._thread is None:
            plan = self.make()
            self._consumed = self.generator.get_state()
        else:
            while True:
                try:
                    item = self._q.get(timeout=_POLL_S)
                    break
                except queue.Empty:
                    if not self._thread.is_alive():
                        raise RuntimeError("the stage-2 prefetch thread stopped without a plan "
                                           "(closed, or killed); see the log above") from None
            if isinstance(item, _Failure):
                self.close()
                raise RuntimeError(f"stage-2 host preparation failed in the prefetch thread: "
                                   f"{type(item.exc).__name__}: {item.exc}") from item.exc
            plan, self._consumed = item
        self.waits.append(time.perf_counter() - t0)
        return plan

    def consumed_generator(self) -> torch.Generator:
        """A generator in the state the data generator had right after the last consumed plan."""
        return torch.Generator().set_state(self._consumed)

    def close(self) -> None:
        """Stop the thread (plans made ahead are dropped; the consumed state stays valid)."""
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:  # unblock a producer waiting on a full queue
                    self._q.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(timeout=_POLL_S)

    def __enter__(self) -> "PlanPrefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
