"""Call counters and the telemetry front-end of the compiled boundary.

Everything here is plain Python that runs OUTSIDE any compiled region (obsidian "Compile notes"): a
counter inside a compiled forward would become a guard and recompile every call.

- :class:`CallCounters`: per net (lensnet, gistnet) x context (train, inference): calls, rows
  (variants / blocks), entries (or tokens) and the set of input shapes; the same per micro-step
  (``reset_step()``); CUDA-graph step-mark requests (with reason) and actual marks; output clones;
  re-entrance events (with reason).
- :class:`Telemetry`: owns a :class:`~mc.compile.monitor.CompileMonitor` and a ``CallCounters``;
  ``snapshot()`` (a JSON-serialisable dict), an optional JSONL stream (one event per line: step
  summaries, compile events, re-entrance) and a debug one-line summary per step.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mc.compile.monitor import CompileMonitor
from mc.io import WriteError

NETS = ("lensnet", "gistnet")
CONTEXTS = ("train", "inference")


def _check(net: str, context: str) -> None:
    if net not in NETS:
        raise ValueError(f"unknown net {net!r}: expected one of {', '.join(NETS)}")
    if context not in CONTEXTS:
        raise ValueError(f"unknown context {context!r}: expected one of {', '.join(CONTEXTS)}")


def _zero() -> dict:
    return {"calls": 0, "rows": 0, "entries": 0}


class CallCounters:
    """Plain-Python call accounting for the compiled nets (never touched inside a graph).

    ``enabled=False`` stops counting calls, marks and clones; re-entrance is always recorded.
    """

    def __init__(self, on_event: Callable[[dict], None] | None = None) -> None:
        self._lock = threading.Lock()
        self.enabled = True
        self.on_event = on_event
        self.totals = {n: {c: _zero() for c in CONTEXTS} for n in NETS}
        self.shapes: dict[str, dict[str, set]] = {n: {c: set() for c in CONTEXTS} for n in NETS}
        self.step = {n: {c: _zero() for c in CONTEXTS} for n in NETS}
        self.step_index = 0
        self.mark_requests: dict[str, int] = {}  # reason -> requests (marked or not)
        self.marks = 0  # cudagraph_mark_step_begin() actually called
        self.step_marks = 0
        self.clones = {n: {c: 0 for c in CONTEXTS} for n in NETS}  # outputs cloned (tensors)
        self.step_clones = 0
        self.reentrance: list[dict] = []

    # ------------------------------------------------------------------ recording
    def record_call(self, net: str, context: str, *, rows: int, entries: int, shape: tuple) -> None:
        """One call of ``net`` in ``context``; ``shape`` = tuple of the input tensors' shapes."""
        _check(net, context)
        if not self.enabled:
            return
        with self._lock:
            for d in (self.totals[net][context], self.step[net][context]):
                d["calls"] += 1
                d["rows"] += int(rows)
                d["entries"] += int(entries)
            self.shapes[net][context].add(tuple(tuple(int(x) for x in s) for s in shape))

    def record_mark(self, reason: str, marked: bool) -> None:
        """A step-mark request; ``marked`` says whether cudagraph_mark_step_begin() really ran."""
        if not self.enabled:
            return
        with self._lock:
            self.mark_requests[reason] = self.mark_requests.get(reason, 0) + 1
            self.step_marks += 1
            if marked:
                self.marks += 1

    def record_clone(self, net: str, context: str, n_tensors: int) -> None:
        _check(net, context)
        if not self.enabled:
            return
        with self._lock:
            self.clones[net][context] += int(n_tensors)
            self.step_clones += int(n_tensors)

    def record_reentrance(self, net: str, context: str, reason: str, action: str) -> dict:
        """Always recorded (even when disabled): re-entrance is a correctness event, not a metric."""
        event = {"kind": "reentrance", "net": net, "context": context, "reason": reason, "action": action,
                 "step": self.step_index, "thread": threading.get_ident(), "time": time.time()}
        with self._lock:
            self.reentrance.append(event)
        if self.on_event is not None:
            self.on_event(event)
        return event

    def reset_step(self) -> dict:
        """End a micro-step: return its per-net/context counts and start the next one."""
        with self._lock:
            summary = {"step": self.step_index, "calls": self.step, "marks": self.step_marks, "clones": self.step_clones}
            self.step = {n: {c: _zero() for c in CONTEXTS} for n in NETS}
            self.step_marks = 0
            self.step_clones = 0
            self.step_index += 1
        return summary

    # ------------------------------------------------------------------ reports
    def snapshot(self) -> dict:
        with self._lock:
            return {
                "enabled": self.enabled,
                "step_index": self.step_index,
                "totals": {n: {c: dict(self.totals[n][c]) for c in CONTEXTS} for n in NETS},
                "shapes": {n: {c: sorted([list(map(list, s)) for s in self.shapes[n][c]]) for c in CONTEXTS} for n in NETS},
                "current_step": {n: {c: dict(self.step[n][c]) for c in CONTEXTS} for n in NETS},
                "mark_requests": dict(self.mark_requests),
                "marks": self.marks,
                "clones": {n: dict(self.clones[n]) for n in NETS},
                "reentrance": [dict(e) for e in self.reentrance],
            }


class Telemetry:
    """Front-end: a CompileMonitor + CallCounters, a JSONL stream and a debug line per step.

    ``jsonl_path`` (optional): events are appended one JSON object per line, flushed each line.
    ``debug``: ``end_step()`` prints (via ``log``) a one-line summary.
    ``device``: used to report the CUDA-graph status (``"n/a (cpu)"`` on CPU).
    """

    def __init__(self, *, jsonl_path: str | os.PathLike | None = None, debug: bool = False,
                 device: Any = "cpu", monitor: CompileMonitor | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.monitor = monitor or CompileMonitor()
        self.counters = CallCounters(on_event=self.emit)
        self.debug = debug
        self.device = device
        self.log = log
        self.cudagraphs_expected = False  # set by the boundary when a net runs reduce-overhead
        self.tags: dict[str, Any] = {}  # merged into every event (distributed training: rank, world_size)
        self._jsonl = None
        self.jsonl_path = Path(jsonl_path) if jsonl_path else None
        if self.jsonl_path is not None:
            try:
                self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
                self._jsonl = open(self.jsonl_path, "a", encoding="utf-8")
            except OSError as exc:  # a read-only or full run folder: one line naming the file (obsidian Runbook)
                raise WriteError(self.jsonl_path, exc) from exc
        self.monitor.add_listener(self.emit)
        self._write_lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Any, run_dir: str | os.PathLike | None, *, device: Any = "cpu") -> "Telemetry":
        """From a :class:`mc.config.TelemetryConfig`: JSONL at ``<run_dir>/telemetry.jsonl`` when enabled."""
        path = Path(run_dir) / "telemetry.jsonl" if (cfg.jsonl and run_dir is not None) else None
        return cls(jsonl_path=path, debug=cfg.debug, device=device)

    @property
    def enabled(self) -> bool:
        return self.counters.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        """Toggle call/mark/clone counting (compile events and re-entrance are always recorded)."""
        self.counters.enabled = bool(value)

    def start(self) -> "Telemetry":
        """Start the compile monitor; call before the first compile."""
        self.monitor.start()
        self.emit({"kind": "start", "time": time.time()})
        return self

    def emit(self, event: dict) -> None:
        """Append one event to the JSONL stream (no-op without a path)."""
        if self._jsonl is None:
            return
        line = json.dumps({**event, **self.tags} if self.tags else event, default=str)
        with self._write_lock:
            try:
                self._jsonl.write(line + "\n")
                self._jsonl.flush()
            except OSError as exc:
                raise WriteError(self.jsonl_path, exc) from exc

    def end_step(self, **extra: Any) -> dict:
        """Close a micro-step: reset the per-step counters, stream the summary, print the debug line."""
        summary = self.counters.reset_step()
        summary.update(extra)
        self.emit({"kind": "step", **summary})
        if self.debug:
            self.log(self.debug_line(summary))
        return summary

    def cudagraph_status(self) -> str:
        return self.monitor.cudagraph_status(self.device, expected=self.cudagraphs_expected)

    def snapshot(self) -> dict:
        """JSON-serialisable: ``{"calls": CallCounters.snapshot(), "compile": CompileMonitor.snapshot(),
        "cudagraph": status}`` (the compile part only once ``start()`` ran)."""
        snap = {"calls": self.counters.snapshot(), "device": str(self.device)}
        if self.monitor.started:
            snap["compile"] = self.monitor.snapshot()
            snap["cudagraph"] = self.cudagraph_status()
        return snap

    def debug_line(self, summary: dict) -> str:
        """``[mc step 3] lensnet/train c=1 r=4 e=256 | gistnet/train c=2 r=64 e=2048 | marks=1 clones=3 | ...``"""
        parts = []
        for n in NETS:
            for c in CONTEXTS:
                d = summary["calls"][n][c]
                if d["calls"]:
                    parts.append(f"{n}/{c} c={d['calls']} r={d['rows']} e={d['entries']}")
        line = f"[mc step {summary['step']}] " + (" | ".join(parts) or "no net calls")
        line += f" | marks={summary['marks']} clones={summary['clones']}"
        if self.monitor.started:
            m = self.monitor.snapshot()
            cur = m["steady"] or m["warmup"]
            line += (f" | {m['phase']}: compiles={cur['compiles']} recompiles={cur['recompiles']}"
                     f" graph_breaks={cur['graph_breaks']} cudagraph={self.cudagraph_status()}")
        if self.counters.reentrance:
            line += f" | REENTRANCE x{len(self.counters.reentrance)}"
        return line

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None

    def __del__(self) -> None:  # best effort; close() is the real API
        jsonl = getattr(self, "_jsonl", None)
        if jsonl is not None:
            jsonl.close()
