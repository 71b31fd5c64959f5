"""Every failed guard of a recompile, with the frame and the source line (see obsidian Telemetry).

Dynamo checks each cache entry of a frame before it recompiles and fails each on one guard, but
the compilation metrics keep only the first entry's failure (``recompile_reason``). When the
first entry differs in grad mode, that text is ``GLOBAL_STATE changed: grad_mode`` and the guard
that really changed (a hook's flag, a module attribute) is lost. This module recovers all of them:

- :class:`GuardFailureLog` diffs ``torch._dynamo.utils.guard_failures`` (code object -> one reason
  per cache entry checked, appended at every recompile) and :func:`split_recompiles` cuts the new
  reasons into one group per recompile (a group starts with that recompile's ``recompile_reason``);
- :func:`parse_refused` reads a compile that ``fail_on_recompile`` (or ``error_on_recompile``)
  refused: the exception text names the frame and lists every failed guard, and nothing else
  records it (no compile happened);
- :func:`parse_reason` turns one reason into ``{"compile_id", "guard", "source"}``, where ``source``
  is the ``file:line in function`` of the user code the guard came from (e.g. the hook's ``if``).

Everything is plain Python outside any compiled region; the private torch pieces are
feature-detected (``available()``), and their absence is reported, never a silent empty list.
"""
from __future__ import annotations

import re
from typing import Any

_ID = re.compile(r"^\[?(\d+/\d+(?:_\d+)?)\]?:\s*")
_FILE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_COMMENT_SRC = re.compile(r"(\S+:\d+) in (\S+)\s*$")
_REFUSED = re.compile(r"filename: '([^']*)', function name: '([^']*)', line number: (\d+)")
_RECOMPILING = re.compile(r"Recompiling function (\S+) in (\S+?):(\d+)")


def _dynamo_guard_failures() -> Any:
    try:
        import torch._dynamo.utils as du  # noqa: PLC0415 - private, feature-detected

        return getattr(du, "guard_failures", None)
    except Exception:  # pragma: no cover - torch without dynamo
        return None


def frame_of(code: Any) -> dict:
    """``{"function", "file", "line"}`` of a code object (the frame Dynamo compiled)."""
    return {"function": getattr(code, "co_name", "?"), "file": getattr(code, "co_filename", "?"),
            "line": getattr(code, "co_firstlineno", None)}


def parse_reason(text: str) -> dict:
    """One cache entry's failure -> ``{"compile_id", "guard", "source"}`` (source may be None)."""
    lines = [ln.rstrip() for ln in str(text).strip().splitlines()]
    first = lines[0] if lines else ""
    m = _ID.match(first)
    compile_id, rest = (m.group(1), first[m.end():]) if m else (None, first)
    guard, *comments = rest.split("  # ")
    source = None
    frames = [f for ln in lines[1:] for f in _FILE.findall(ln)]
    if frames:  # the user stack: its innermost frame is the line that created the guard
        path, line, fn = frames[-1]
        source = f"{path}:{line} in {fn}"
    elif comments and _COMMENT_SRC.search(comments[-1]):
        src = _COMMENT_SRC.search(comments[-1])
        source = f"{src.group(1)} in {src.group(2)}"
    return {"compile_id": compile_id, "guard": guard.strip(), "source": source}


def describe(recompile: dict, limit: int = 400) -> str:
    """One line for a recorded recompile: frame, then every failed guard with its source line."""
    f = recompile.get("frame") or {}
    head = ("refused recompile" if recompile.get("refused") else "recompile") + \
        f" of {f.get('function')} ({f.get('file')}:{f.get('line')})"
    guards = "; ".join(f"{g['compile_id']}: {g['guard'][:limit]}" + (f" [at {g['source']}]" if g["source"] else "")
                       for g in recompile.get("guards", []))
    return f"{head}: {guards or 'no guard text'}"


class GuardFailureLog:
    """Reasons torch appended to ``guard_failures`` since the last :meth:`poll`, per frame."""

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    @staticmethod
    def available() -> bool:
        return _dynamo_guard_failures() is not None

    def reset(self) -> None:
        """Everything recorded so far counts as seen (call at monitor start)."""
        gf = _dynamo_guard_failures()
        self._seen = {id(code): len(v) for code, v in list(gf.items())} if gf is not None else {}

    def poll(self) -> list[tuple[dict, list[str]]]:
        """``[(frame, new reasons)]`` for every code object with reasons appended since the last poll."""
        gf = _dynamo_guard_failures()
        if gf is None:
            return []
        out = []
        for code, reasons in list(gf.items()):
            start = self._seen.get(id(code), 0)
            if start > len(reasons):  # torch._dynamo.reset() cleared the log
                start = 0
            if len(reasons) > start:
                out.append((frame_of(code), list(reasons[start:])))
            self._seen[id(code)] = len(reasons)
        return out


def split_recompiles(new: list[tuple[dict, list[str]]], firsts: list[str]) -> list[tuple[dict | None, list[str]]]:
    """One ``(frame, reasons)`` per recompile, in the order of ``firsts`` (each recompile's first reason).

    A recompile appends one reason per cache entry, beginning with the one the metrics keep; so a
    group runs from its first reason to the next group's first reason of the same frame. A first
    reason not found anywhere gives ``(None, [first])``: at least the metrics' text survives.
    """
    starts: list[tuple[int, int] | None] = []  # (index into new, position) per recompile
    cursor = [0] * len(new)
    for first in firsts:
        hit = None
        for i, (_, reasons) in enumerate(new):
            if first in reasons[cursor[i]:]:
                hit = (i, reasons.index(first, cursor[i]))
                cursor[i] = hit[1] + 1
                break
        starts.append(hit)
    out: list[tuple[dict | None, list[str]]] = []
    for k, hit in enumerate(starts):
        if hit is None:
            out.append((None, [firsts[k]]))
            continue
        i, pos = hit
        later = [h[1] for h in starts[k + 1:] if h is not None and h[0] == i]
        out.append((new[i][0], new[i][1][pos: later[0] if later else None]))
    return out


def parse_refused(text: str) -> dict | None:
    """``{"frame", "guards"}`` from a fail_on_recompile / error_on_recompile exception text, else None."""
    m = _REFUSED.search(text)
    if m:
        frame = {"function": m.group(2), "file": m.group(1), "line": int(m.group(3))}
    elif (m := _RECOMPILING.search(text)) and "guard failure" in text:
        frame = {"function": m.group(1), "file": m.group(2), "line": int(m.group(3))}
    elif "Detected recompile when torch.compile stance" in text:  # older torch: neither frame nor guards
        frame = {"function": None, "file": None, "line": None}
    else:
        return None
    reasons: list[list[str]] = []
    listed = text.split("guard failure(s):", 1)[1] if "guard failure(s):" in text else ""
    for ln in listed.splitlines():
        body = ln.strip()
        if not body.startswith("-"):
            continue
        body = body[1:].strip()
        if _ID.match(body) or not reasons:
            reasons.append([body])
        else:
            reasons[-1].append(body)
    return {"frame": frame, "guards": [parse_reason("\n".join(r)) for r in reasons]}


class RecompileLog:
    """Per phase, every recompile (compiled or refused) as ``{"compile_id", "frame", "guards", "refused"}``.

    The :class:`~mc.compile.monitor.CompileMonitor` feeds it the new compilation-metrics records at
    each poll (:meth:`add_compiled`) and the refused compiles the boundary caught (:meth:`add_refused`).
    """

    def __init__(self) -> None:
        self.failures = GuardFailureLog()
        self.by_phase: dict[str, list[dict]] = {}

    def reset(self, phases: tuple[str, ...]) -> None:
        self.failures.reset()
        self.by_phase = {p: [] for p in phases}

    def add_compiled(self, phase: str, records: list[dict]) -> list[dict]:
        """``records``: the monitor's summaries of new metrics records (``compile_id``, ``co_name``,
        ``recompile_reason``); returns one entry per recompile among them."""
        new = self.failures.poll()  # always: the cursor must move past reasons of first compiles too
        recompiles = [r for r in records if r.get("recompile_reason")]
        groups = split_recompiles(new, [r["recompile_reason"] for r in recompiles]) if self.failures.available() \
            else [(None, [r["recompile_reason"]]) for r in recompiles]
        entries = [{"compile_id": r["compile_id"], "refused": False, "reason": r["recompile_reason"],
                    "frame": frame or {"function": r.get("co_name"), "file": None, "line": None},
                    "guards": [parse_reason(x) for x in reasons]} for r, (frame, reasons) in zip(recompiles, groups)]
        self.by_phase.setdefault(phase, []).extend(entries)
        return entries

    def add_refused(self, phase: str, text: str) -> dict | None:
        """A compile ``fail_on_recompile`` refused (the exception ``text``); None if ``text`` is no such error."""
        parsed = parse_refused(text)
        if parsed is None:
            return None
        if not parsed["guards"]:  # a torch whose refusal lists no guards: keep its text, never an empty list
            parsed["guards"] = [{"compile_id": None, "guard": " ".join(text.split())[:600], "source": None}]
        entry = {"compile_id": None, "refused": True, "reason": None, **parsed}
        self.by_phase.setdefault(phase, []).append(entry)
        return entry

    def summary(self, phase: str) -> dict:
        entries = self.by_phase.get(phase, [])
        return {"recompile_guards": [dict(e) for e in entries],
                "refused_recompiles": sum(1 for e in entries if e["refused"])}


def describe_all(entries: list[dict], limit: int = 10) -> list[str]:
    """:func:`describe` of each entry, identical lines merged with a count (a refused call repeats),
    at most ``limit`` lines (then how many more)."""
    lines = [describe(e) for e in entries]
    out = [f"{d} (x{lines.count(d)})" if lines.count(d) > 1 else d for d in dict.fromkeys(lines)]
    return out[:limit] + ([f"... and {len(out) - limit} more recompile(s)"] if len(out) > limit else [])
