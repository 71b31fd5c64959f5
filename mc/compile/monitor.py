"""CompileMonitor: a process-wide detector of torch.compile events, split into warm-up and steady state.

What it watches (each source is feature-detected; a missing one is reported in ``notes`` and its
numbers become ``None``, never a silent 0):

- ``torch._dynamo.callback.on_compile_start/on_compile_end``: one event per outermost compile,
  with its trigger (``DYNAMO`` = a frame compile, ``LAZY_BACKWARD`` = the first backward of a
  compiled forward, ``CUDAGRAPH_RECORDING`` = a CUDA-graph tree recording) and duration.
- ``torch._dynamo.utils.get_compilation_metrics()``: one record per frame compile, carrying the
  guard text of a recompile (``recompile_reason``) and failure reasons. The records live in a
  bounded deque, so they are diffed by object identity (not by length) and the bound is raised.
- ``torch._dynamo.utils.counters``: ``graph_break`` (reason -> count), ``inductor.cudagraph_skips``
  and ``stats.unique_graphs``, diffed against the values at ``start()`` / ``freeze_point()``.
- every failed guard of each recompile, compiled or refused by ``fail_on_recompile`` (the boundary
  calls :meth:`record_refused`), with frame and source line: :class:`mc.compile.guards.RecompileLog`.

``torch._dynamo.reset()`` clears every registered compile callback; the monitor notices that at the
next ``start()`` / ``snapshot()``, re-registers, and records a note that events may have been missed.
"""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable

import torch

from mc.compile.guards import RecompileLog

PHASES = ("warmup", "steady")
_EVENT_CAP = 5000  # events kept in memory; more are counted in "events_dropped"
_METRICS_LIMIT = 100_000  # raised bound of torch's compilation-metrics deque (default 64)


def _dynamo_utils():
    try:
        import torch._dynamo.utils as du  # noqa: PLC0415 - private module, feature-detected

        return du
    except Exception:  # pragma: no cover - torch without dynamo
        return None


def _callback_module():
    try:
        import torch._dynamo.callback as cb  # noqa: PLC0415

        if hasattr(cb, "on_compile_start") and hasattr(cb, "on_compile_end"):
            return cb
    except Exception:  # pragma: no cover
        pass
    return None


class _Hub:
    """The single pair of callbacks registered with torch; fans events out to live monitors.

    One per process, so repeated ``start()`` calls (or several monitors) never double-count.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.monitors: list["CompileMonitor"] = []
        self.open: dict[tuple[str, str], float] = {}  # (trigger, compile_id) -> start time
        self.ever_installed = False

    def _handler(self):
        cb = _callback_module()
        return getattr(cb, "callback_handler", None) if cb is not None else None

    def installed(self) -> bool:
        h = self._handler()
        if h is None:
            return False
        return self._on_start in getattr(h, "start_callbacks", []) and self._on_end in getattr(h, "end_callbacks", [])

    def ensure(self) -> str | None:
        """Register the callbacks if they are not; returns a note when they had been removed."""
        cb = _callback_module()
        if cb is None:
            return None
        if self.installed():
            return None
        h = self._handler()
        if h is not None:  # remove a half-registered pair before re-adding
            for lst, fn in ((getattr(h, "start_callbacks", []), self._on_start), (getattr(h, "end_callbacks", []), self._on_end)):
                while fn in lst:
                    lst.remove(fn)
        cb.on_compile_start(self._on_start)
        cb.on_compile_end(self._on_end)
        note = None
        if self.ever_installed:
            note = "compile callbacks had been cleared (torch._dynamo.reset()?) and were re-registered; events in between were missed"
        self.ever_installed = True
        return note

    @staticmethod
    def _describe(args: Any) -> tuple[str, str]:
        trig = getattr(args, "callback_trigger", None)
        trigger = getattr(trig, "name", None) or (str(trig) if trig is not None else "UNKNOWN")
        return trigger, str(getattr(args, "compile_id", None))

    def _on_start(self, args: Any = None) -> None:
        trigger, cid = self._describe(args)
        with self.lock:
            self.open[(trigger, cid)] = time.perf_counter()

    def _on_end(self, args: Any = None) -> None:
        trigger, cid = self._describe(args)
        with self.lock:
            t0 = self.open.pop((trigger, cid), None)
            monitors = list(self.monitors)
        duration = time.perf_counter() - t0 if t0 is not None else None
        for m in monitors:
            m._on_compile_event(trigger, cid, duration)


_HUB = _Hub()


def _counter_values() -> dict[str, Any] | None:
    du = _dynamo_utils()
    counters = getattr(du, "counters", None) if du is not None else None
    if counters is None:
        return None
    return {
        "graph_break": dict(counters.get("graph_break", {})),
        "cudagraph_skips": int(counters.get("inductor", {}).get("cudagraph_skips", 0)),
        "unique_graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
    }


class CompileMonitor:
    """Counts compiles, recompiles (with guard text), graph breaks, CUDA-graph recordings and skips.

    ``start()`` before compiling; ``freeze_point()`` when warm-up ends; ``snapshot()`` any time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = False
        self.phase = "warmup"
        self.warn_on_steady = False  # freeze "warn": a steady-state compile emits a warning
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self._pending_warnings: list[str] = []
        self.events: list[dict] = []
        self.events_dropped = 0
        self._listeners: list[Callable[[dict], None]] = []
        self._recompile_log = RecompileLog()
        self._reset_phase_data()

    # ------------------------------------------------------------------ set-up
    def _reset_phase_data(self) -> None:
        self._events_by_phase = {p: {"DYNAMO": 0, "LAZY_BACKWARD": 0, "CUDAGRAPH_RECORDING": 0, "OTHER": 0, "time_s": 0.0} for p in PHASES}
        self._records = {p: [] for p in PHASES}  # summarised compilation-metrics records
        self._seen_records: list[Any] = []  # the torch records already attributed (identity diff)
        self._counter_base = {p: None for p in PHASES}
        self._reason_missing = False
        self._recompile_log.reset(PHASES)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def has_callbacks(self) -> bool:
        return _callback_module() is not None

    @property
    def has_metrics(self) -> bool:
        du = _dynamo_utils()
        return du is not None and hasattr(du, "get_compilation_metrics")

    def start(self) -> "CompileMonitor":
        """Install (idempotent) and take the baseline; a second call re-baselines and clears."""
        note = _HUB.ensure()
        if note:
            self._note(note)
        if not self.has_callbacks:
            self._note("torch._dynamo.callback unavailable: compiles counted from compilation metrics; CUDA-graph recordings and lazy-backward compiles not observable (None)")
        du = _dynamo_utils()
        if self.has_metrics:
            dq = getattr(du, "_compilation_metrics", None)
            maxlen = getattr(dq, "maxlen", None)
            if maxlen is not None and maxlen < _METRICS_LIMIT and hasattr(du, "set_compilation_metrics_limit"):
                du.set_compilation_metrics_limit(_METRICS_LIMIT)
        else:
            self._note("torch._dynamo.utils.get_compilation_metrics unavailable: recompile guard texts not observable (None)")
        if _counter_values() is None:
            self._note("torch._dynamo.utils.counters unavailable: graph breaks / cudagraph skips not observable (None)")
        if not self._recompile_log.failures.available():
            self._note("torch._dynamo.utils.guard_failures unavailable: a recompile keeps only its first failed guard")
        with self._lock:
            self.phase = "warmup"
            self.events = []
            self.events_dropped = 0
            self.warnings = []
            self._reset_phase_data()
            self._seen_records = self._metrics_list()
            self._counter_base["warmup"] = _counter_values()
        with _HUB.lock:
            if self not in _HUB.monitors:
                _HUB.monitors.append(self)
        self.started = True
        return self

    def stop(self) -> None:
        """Stop receiving events (the torch callbacks stay registered for other monitors)."""
        with _HUB.lock:
            if self in _HUB.monitors:
                _HUB.monitors.remove(self)
        self.started = False

    def add_listener(self, fn: Callable[[dict], None]) -> None:
        """``fn(event_dict)`` is called for every compile event and newly seen recompile record."""
        self._listeners.append(fn)

    def freeze_point(self) -> None:
        """Mark the end of warm-up: everything seen so far is warm-up, everything later is steady."""
        self._require_started()
        self._poll()
        with self._lock:
            self.phase = "steady"
            self._counter_base["steady"] = _counter_values()

    # ------------------------------------------------------------------ sources
    def _require_started(self) -> None:
        if not self.started:
            raise RuntimeError("CompileMonitor.start() must be called before compiling (and before freeze_point/snapshot)")

    @staticmethod
    def _metrics_list() -> list[Any]:
        du = _dynamo_utils()
        if du is None or not hasattr(du, "get_compilation_metrics"):
            return []
        return list(du.get_compilation_metrics())

    def _emit(self, event: dict) -> None:
        with self._lock:
            if len(self.events) < _EVENT_CAP:
                self.events.append(event)
            else:
                self.events_dropped += 1
        for fn in list(self._listeners):
            fn(event)

    def _on_compile_event(self, trigger: str, compile_id: str, duration: float | None) -> None:
        with self._lock:
            phase = self.phase
            bucket = self._events_by_phase[phase]
            bucket[trigger if trigger in bucket else "OTHER"] += 1
            if duration is not None and trigger in ("DYNAMO", "LAZY_BACKWARD"):
                bucket["time_s"] += duration
        event = {"kind": "compile", "trigger": trigger, "compile_id": compile_id, "phase": phase,
                 "duration_s": None if duration is None else round(duration, 6)}
        if phase == "steady" and self.warn_on_steady:
            msg = f"compile after warm-up (freeze=warn): trigger={trigger} compile_id={compile_id}"
            # recorded here, raised as a Python warning at the next snapshot(): a warning turned
            # into an error (pytest -W error) must not be raised inside torch's compile callback
            with self._lock:
                self.warnings.append(msg)
                self._pending_warnings.append(msg)
        self._emit(event)

    def _poll(self) -> None:
        """Attribute compilation-metrics records not seen before to the current phase."""
        current = self._metrics_list()
        seen_ids = {id(r) for r in self._seen_records}
        new = [r for r in current if id(r) not in seen_ids]
        if self._seen_records and current and not any(id(r) in seen_ids for r in current) and len(current) >= _METRICS_LIMIT:
            self._note("compilation-metrics deque overflowed between polls: some records may be missing")
        self._seen_records = current
        with self._lock:
            phase = self.phase
        if any(not hasattr(r, "recompile_reason") for r in new):
            # an older CompilationMetrics without the field: a count of 0 would be a silent lie
            self._reason_missing = True
            self._note("compilation metrics carry no recompile_reason in this torch: recompiles not observable (None)")
        recs = []
        for r in new:
            rec = {
                "compile_id": getattr(r, "compile_id", None),
                "co_name": getattr(r, "co_name", None),
                "recompile_reason": getattr(r, "recompile_reason", None),
                "fail_type": getattr(r, "fail_type", None),
                "fail_reason": getattr(r, "fail_reason", None),
                "cudagraph_skip_reason": getattr(r, "cudagraph_skip_reason", None),
                "time_s": getattr(r, "entire_frame_compile_time_s", None),
            }
            with self._lock:
                self._records[phase].append(rec)
            recs.append(rec)
        with self._lock:  # snapshot() reads the log under this lock
            entries = self._recompile_log.add_compiled(phase, recs)
        for entry in entries:  # every failed guard, not just the first
            self._emit({"kind": "recompile", "phase": phase, "co_name": entry["frame"]["function"],
                        **{k: entry[k] for k in ("compile_id", "reason", "frame", "guards")}})

    def record_refused(self, error: BaseException | str) -> bool:
        """Record a compile that ``fail_on_recompile`` refused (nothing else sees it: no compile ran).
        Returns False when ``error`` is not such a refusal or the monitor is not started."""
        if not self.started:
            return False
        with self._lock:
            phase = self.phase
            entry = self._recompile_log.add_refused(phase, str(error))
        if entry is not None:
            self._emit({"kind": "recompile_refused", "phase": phase, "frame": entry["frame"], "guards": entry["guards"]})
        return entry is not None

    # ------------------------------------------------------------------ reports
    def _phase_summary(self, phase: str) -> dict:
        recs = self._records[phase]
        frame_recs = [r for r in recs if r["co_name"]]  # records without co_name: backward/aot parts
        ev = self._events_by_phase[phase]
        base = self._counter_base[phase]
        end = self._counter_base["steady"] if phase == "warmup" and self.phase == "steady" else _counter_values()
        reasons = [r["recompile_reason"] for r in frame_recs if r["recompile_reason"]]
        out: dict[str, Any] = {}
        if self.has_callbacks:
            out["compiles"] = ev["DYNAMO"]
            out["lazy_backward_compiles"] = ev["LAZY_BACKWARD"]
            out["cudagraph_recordings"] = ev["CUDAGRAPH_RECORDING"]
            out["compile_time_s"] = round(ev["time_s"], 4)
        else:
            out["compiles"] = len(frame_recs) if self.has_metrics else None
            out["lazy_backward_compiles"] = None
            out["cudagraph_recordings"] = None
            out["compile_time_s"] = round(sum(r["time_s"] or 0.0 for r in frame_recs), 4) if self.has_metrics else None
        out["recompiles"] = len(reasons) if self.has_metrics and not self._reason_missing else None
        out["recompile_reasons"] = reasons
        out["failures"] = [f"{r['fail_type']}: {r['fail_reason']}" for r in recs if r["fail_reason"]]
        if base is not None and end is not None:
            gb = {k: end["graph_break"].get(k, 0) - base["graph_break"].get(k, 0) for k in end["graph_break"]}
            gb = {k: v for k, v in gb.items() if v > 0}
            out["graph_breaks"] = sum(gb.values())
            out["graph_break_reasons"] = sorted(gb)
            out["cudagraph_skips"] = end["cudagraph_skips"] - base["cudagraph_skips"]
            out["unique_graphs"] = end["unique_graphs"] - base["unique_graphs"]
        else:
            out.update(graph_breaks=None, graph_break_reasons=[], cudagraph_skips=None, unique_graphs=None)
        out["cudagraph_skip_reasons"] = sorted({r["cudagraph_skip_reason"] for r in recs if r["cudagraph_skip_reason"]})
        out.update(self._recompile_log.summary(phase))  # recompile_guards (frame + all guards), refused_recompiles
        return out

    def snapshot(self) -> dict:
        """A JSON-serialisable dict: ``warmup`` / ``steady`` summaries, ``events``, ``notes``."""
        self._require_started()
        note = _HUB.ensure() if self.has_callbacks and not _HUB.installed() else None
        if note:
            self._note(note)
        self._poll()
        with self._lock:
            pending, self._pending_warnings = self._pending_warnings, []
        for msg in pending:
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        with self._lock:
            snap = {
                "frozen": self.phase == "steady",
                "phase": self.phase,
                "sources": {"callbacks": self.has_callbacks, "compilation_metrics": self.has_metrics,
                            "counters": _counter_values() is not None},
                "warmup": self._phase_summary("warmup"),
                "steady": self._phase_summary("steady") if self.phase == "steady" else None,
                "events": list(self.events),
                "events_dropped": self.events_dropped,
                "warnings": list(self.warnings),
                "notes": list(self.notes),
            }
        return snap

    def cudagraph_status(self, device: Any, *, expected: bool = True) -> str:
        """One word for the CUDA-graph state on ``device``.

        CPU: ``"n/a (cpu)"`` (reduce-overhead compiles there but skips capture silently: counted,
        never failed). CUDA: ``"off"`` when no net uses a CUDA-graph mode, ``"skipped"`` (any skip),
        ``"not recorded"`` (no recording event), ``"re-recorded"`` (a recording after warm-up),
        ``"unknown (...)"`` when the sources are missing, else ``"ok"``.
        """
        dev = torch.device(device) if not isinstance(device, torch.device) else device
        if dev.type != "cuda":
            return f"n/a ({dev.type})"
        if not expected:
            return "off"
        snap = self.snapshot()
        phases = [snap["warmup"]] + ([snap["steady"]] if snap["steady"] else [])
        if any(p["cudagraph_skips"] is None or p["cudagraph_recordings"] is None for p in phases):
            return "unknown (recording events or skip counter unavailable)"
        if sum(p["cudagraph_skips"] for p in phases) > 0:
            return "skipped"
        if snap["steady"] and snap["steady"]["cudagraph_recordings"] > 0:
            return "re-recorded"
        if sum(p["cudagraph_recordings"] for p in phases) == 0:
            return "not recorded"
        return "ok"
