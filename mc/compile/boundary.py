"""The compiled boundary: the one place LensNet and GistNet are compiled, called, cloned and marked.

Rules it enforces or supports (obsidian "Design" and "Compile notes"):
- ``CompiledNet`` compiles a module once per compile mode with ``fullgraph=True, dynamic=False``
  (a graph break is an error; shapes come from a bucket ladder) and counts every call in plain
  Python outside the graph. ``run()`` returns the RAW output (for the controller's helpers only);
  ``clone_outputs()`` clones it exactly once; ``__call__`` does both.
- Re-entrance (a call from inside an autograd backward, or while another boundary call is in
  flight) is detected and, per policy, raised, run eagerly, or only recorded.
- ``StepMarker`` is the single owner of ``torch.compiler.cudagraph_mark_step_begin()``.
- Recompile-limit sizing, freeze (``fail_on_recompile`` / warn / off), CUDA-graph strict mode and
  the Mega-Cache live here too; every torch API is feature-detected.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn

from mc.compile.telemetry import CONTEXTS, NETS, Telemetry
from mc.io import write_bytes

CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")  # modes that turn on triton.cudagraphs
REENTRANCE_POLICIES = ("raise", "eager", "record")


# ---------------------------------------------------------------------------- re-entrance
class _InFlight:
    """Boundary calls currently running, process-wide (all CompiledNets share it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, int]] = []  # (net, context, thread id)


_IN_FLIGHT = _InFlight()


def in_backward() -> bool | None:
    """True inside an autograd backward (graph task running); None if torch cannot tell."""
    fn = getattr(torch._C, "_current_graph_task_id", None)
    if fn is None:
        return None
    return fn() != -1


def reentrance_reason() -> str | None:
    """Why a boundary call now would be re-entrant, or None."""
    if in_backward():
        return "inside autograd backward (torch._C._current_graph_task_id() != -1)"
    with _IN_FLIGHT.lock:
        if _IN_FLIGHT.calls:
            net, ctx, tid = _IN_FLIGHT.calls[-1]
            return f"another helper call in flight ({net}/{ctx} on thread {tid})"
    return None


# ---------------------------------------------------------------------------- clone
def _clone_tree(out: Any) -> tuple[Any, int]:
    if isinstance(out, torch.Tensor):
        return out.clone(), 1
    if isinstance(out, (tuple, list)):
        items, n = [], 0
        for o in out:
            c, k = _clone_tree(o)
            items.append(c)
            n += k
        return type(out)(items), n
    raise TypeError(f"clone_outputs expects a tensor or a tuple/list of tensors, got {type(out).__name__}")


def clone_outputs(out: Any, *, telemetry: Telemetry | None = None, net: str = "lensnet",
                  context: str = "train") -> Any:
    """Clone a tensor (or tuple/list of tensors) once, outside the compiled region, and count it.

    The clone is a new tensor in ordinary memory, so a later CUDA-graph replay cannot overwrite
    it; autograd flows through ``clone()``.
    """
    cloned, n = _clone_tree(out)
    if telemetry is not None:
        telemetry.counters.record_clone(net, context, n)
    return cloned


# ---------------------------------------------------------------------------- CompiledNet
def _module_device(module: nn.Module) -> torch.device:
    for t in list(module.parameters()) + list(module.buffers()):
        return t.device
    return torch.device("cpu")


def _default_sizes(args: Sequence[Any]) -> tuple[int, int]:
    """rows = first tensor's dim 0 (variants / blocks); entries = dim0 * dim1 (entries / tokens)."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() >= 1:
            rows = int(a.shape[0])
            return rows, rows * (int(a.shape[1]) if a.dim() >= 2 else 1)
    return 0, 0


class CompiledNet:
    """One net behind the boundary, compiled per context according to ``modes``.

    ``modes``: a :class:`mc.config.NetCompileConfig` (``train`` / ``inference`` in COMPILE_MODES);
    a context whose mode is ``"off"`` calls the module eagerly. ``backend`` (default Inductor) may
    be ``"eager"`` / ``"aot_eager"`` for fast tests; ``mode`` is then ignored.
    """

    def __init__(self, module: nn.Module, name: str, modes: Any, *, fullgraph: bool = True,
                 telemetry: Telemetry | None = None, reentrance: str = "raise", backend: str | None = None) -> None:
        if name not in NETS:
            raise ValueError(f"CompiledNet name {name!r}: expected one of {', '.join(NETS)}")
        if reentrance not in REENTRANCE_POLICIES:
            raise ValueError(f"reentrance={reentrance!r}: expected one of {', '.join(REENTRANCE_POLICIES)}")
        self.module = module
        self.name = name
        self.modes = {c: getattr(modes, c) for c in CONTEXTS}
        self.fullgraph = fullgraph
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.reentrance = reentrance
        self.backend = backend
        by_mode: dict[str, Any] = {}  # contexts with the same mode share one compiled callable
        self._fns: dict[str, Any] = {}
        for ctx, mode in self.modes.items():
            if mode == "off":
                self._fns[ctx] = module
                continue
            if mode not in by_mode:
                if backend in (None, "inductor"):
                    by_mode[mode] = torch.compile(module, mode=mode, fullgraph=fullgraph, dynamic=False)
                else:
                    by_mode[mode] = torch.compile(module, backend=backend, fullgraph=fullgraph, dynamic=False)
            self._fns[ctx] = by_mode[mode]
        if self.cudagraphs_possible:
            self.telemetry.cudagraphs_expected = True

    @property
    def device(self) -> torch.device:
        return _module_device(self.module)

    @property
    def cudagraphs_possible(self) -> bool:
        """Some context runs a CUDA-graph mode with Inductor on a CUDA device."""
        uses = any(m in CUDAGRAPH_MODES for m in self.modes.values()) and self.backend in (None, "inductor")
        return uses and self.device.type == "cuda"

    def run(self, *args: Any, context: str, rows: int | None = None, entries: int | None = None) -> Any:
        """Call the net for ``context`` and return its RAW output (controller helpers only).

        Counts the call (rows/entries default from the first tensor: dim 0 and dim0*dim1).
        Re-entrance is recorded, then handled per policy: "raise" (RuntimeError), "eager" (the
        module runs uncompiled), "record" (proceeds normally).
        """
        if context not in CONTEXTS:
            raise ValueError(f"context={context!r}: expected one of {', '.join(CONTEXTS)}")
        fn = self._fns[context]
        reason = reentrance_reason()
        if reason is not None:
            action = {"raise": "raised", "eager": "ran eagerly", "record": "recorded only"}[self.reentrance]
            self.telemetry.counters.record_reentrance(self.name, context, reason, action)
            if self.reentrance == "raise":
                raise RuntimeError(
                    f"re-entrant call of {self.name} ({context}): {reason}. Compiled nets may only be called "
                    "from the controller's helpers, never from an autograd backward hook or while another "
                    "helper call is running (CUDA-graph trees are not re-entrant). Move the call out of the "
                    "hook, or build the CompiledNet with reentrance='eager' to run such calls uncompiled.")
            if self.reentrance == "eager":
                fn = self.module
        d_rows, d_entries = _default_sizes(args)
        shape = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        self.telemetry.counters.record_call(self.name, context, rows=d_rows if rows is None else rows,
                                            entries=d_entries if entries is None else entries, shape=shape)
        token = (self.name, context, threading.get_ident())
        with _IN_FLIGHT.lock:
            _IN_FLIGHT.calls.append(token)
        try:
            return fn(*args)
        except Exception as exc:
            self.telemetry.monitor.record_refused(exc)  # a compile fail_on_recompile refused: keep its guards
            raise
        finally:
            with _IN_FLIGHT.lock:
                _IN_FLIGHT.calls.remove(token)

    def clone_outputs(self, out: Any, *, context: str) -> Any:
        """Clone ``out`` exactly once and count it against this net/context."""
        return clone_outputs(out, telemetry=self.telemetry, net=self.name, context=context)

    def __call__(self, *args: Any, context: str, rows: int | None = None, entries: int | None = None) -> Any:
        """``run`` + ``clone_outputs``: the returned tensor is never the compiled raw output."""
        return self.clone_outputs(self.run(*args, context=context, rows=rows, entries=entries), context=context)


# ---------------------------------------------------------------------------- step marks
class StepMarker:
    """The single owner of ``torch.compiler.cudagraph_mark_step_begin()``.

    Marks only when CUDA graphs can be active (some net runs a CUDA-graph mode on CUDA), because
    marking switches the process to manual generations for good; every request is counted with
    its reason either way. ``active`` overrides the detection (tests / harness).
    """

    def __init__(self, nets: Sequence[CompiledNet] = (), telemetry: Telemetry | None = None,
                 *, active: bool | None = None) -> None:
        self.nets = list(nets)
        self.telemetry = telemetry if telemetry is not None else (self.nets[0].telemetry if self.nets else Telemetry())
        self._active = active

    @property
    def active(self) -> bool:
        if self._active is not None:
            return self._active
        return any(n.cudagraphs_possible for n in self.nets)

    def mark(self, reason: str) -> bool:
        """Request a step boundary; returns True if cudagraph_mark_step_begin() was called."""
        marked = False
        if self.active:
            fn = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
            if fn is None:
                raise RuntimeError("torch.compiler.cudagraph_mark_step_begin is missing in this torch; "
                                   "CUDA-graph modes cannot be used safely (use compile mode 'default')")
            fn()
            marked = True
        self.telemetry.counters.record_mark(reason, marked)
        return marked


# ---------------------------------------------------------------------------- recompile control
def grads_outside_graph_pool(params: Iterable[nn.Parameter]) -> None:
    """Give every trainable parameter without one a zero ``.grad``; call before a compiled backward under CUDA
    graphs. A grad that backward allocates lives in the graph pool (warm-up runs allocate there too), is kept as
    ``.grad``, and a later replay overwrites it: the first H100 run's bench train step (no warm-up) failed so."""
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def recompile_limit_for(n_buckets: int, n_modes: int, margin: int = 2) -> int:
    """Cache entries one code object needs: buckets x modes (grad mode x train/eval x autocast) + margin."""
    for k, v in (("n_buckets", n_buckets), ("n_modes", n_modes)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"recompile_limit_for: {k}={v!r} must be a positive integer")
    if not isinstance(margin, int) or margin < 0:
        raise ValueError(f"recompile_limit_for: margin={margin!r} must be an integer >= 0")
    return n_buckets * n_modes + margin


def apply_recompile_limit(n: int, *, n_code_objects: int = 2, fail_on_limit: bool = True) -> dict:
    """Set Dynamo's per-code-object limit to ``n`` (and the accumulated limit to cover all nets).

    Returns the previous values. ``fail_on_limit`` makes hitting the limit raise instead of
    silently falling back to eager (fullgraph=True raises anyway).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"apply_recompile_limit: n={n!r} must be a positive integer")
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    acc = "accumulated_recompile_limit" if hasattr(cfg, "accumulated_recompile_limit") else "accumulated_cache_size_limit"
    old = {name: getattr(cfg, name)}
    setattr(cfg, name, n)
    if hasattr(cfg, acc):
        old[acc] = getattr(cfg, acc)
        setattr(cfg, acc, max(old[acc], n * n_code_objects))
    if fail_on_limit and hasattr(cfg, "fail_on_recompile_limit_hit"):
        old["fail_on_recompile_limit_hit"] = cfg.fail_on_recompile_limit_hit
        cfg.fail_on_recompile_limit_hit = True
    return old


_FREEZE_STATE: dict[str, Any] = {}


def freeze(mode: str, monitor: Any = None) -> str:
    """End warm-up. "fail": any later compile raises (set_stance fail_on_recompile, or the older
    ``error_on_recompile`` when set_stance is missing); "warn": the monitor flags later compiles;
    "off": only the warm-up/steady split. Returns a one-line description."""
    if mode not in ("fail", "warn", "off"):
        raise ValueError(f"freeze mode {mode!r}: expected fail, warn or off")
    if monitor is not None:
        monitor.freeze_point()
    if mode == "fail":
        if hasattr(torch.compiler, "set_stance"):
            torch.compiler.set_stance("fail_on_recompile")
            _FREEZE_STATE["stance"] = True
            return "frozen: set_stance('fail_on_recompile')"
        _FREEZE_STATE["error_on_recompile"] = torch._dynamo.config.error_on_recompile
        torch._dynamo.config.error_on_recompile = True
        if monitor is not None:
            monitor._note("set_stance unavailable: freeze=fail uses error_on_recompile (a new code object still compiles)")
        return "frozen: torch._dynamo.config.error_on_recompile=True (set_stance unavailable)"
    if mode == "warn":
        if monitor is None:
            raise ValueError("freeze('warn') needs the CompileMonitor that should flag steady-state compiles")
        monitor.warn_on_steady = True
        return "frozen: warn on compiles after warm-up"
    return "frozen: off (warm-up/steady split only)"


def unfreeze(monitor: Any = None) -> None:
    """Undo :func:`freeze` (stance back to default, warnings off)."""
    if _FREEZE_STATE.pop("stance", False):
        torch.compiler.set_stance("default")
    if "error_on_recompile" in _FREEZE_STATE:
        torch._dynamo.config.error_on_recompile = _FREEZE_STATE.pop("error_on_recompile")
    if monitor is not None:
        monitor.warn_on_steady = False


class strict_cudagraphs:  # noqa: N801 - used like a function: a setter and a context manager
    """Harness strict mode: ``triton.cudagraph_or_error=True`` and ``graph_partition=False``, so a
    CUDA-graph skip raises instead of silently splitting the graph.

    ``strict_cudagraphs()`` applies at once (``.restore()`` undoes); ``with strict_cudagraphs():``
    restores on exit. ``missing`` lists options this torch lacks (strictness then incomplete).
    """

    def __init__(self, enabled: bool = True) -> None:
        import torch._inductor.config as icfg  # noqa: PLC0415

        self._saved: list[tuple[Any, str, Any]] = []
        self.missing: list[str] = []
        for obj, attr, label in ((getattr(icfg, "triton", None), "cudagraph_or_error", "triton.cudagraph_or_error"),
                                 (icfg, "graph_partition", "graph_partition")):
            if obj is None or not hasattr(obj, attr):
                self.missing.append(label)
                continue
            self._saved.append((obj, attr, getattr(obj, attr)))
            value = enabled if attr == "cudagraph_or_error" else (not enabled)
            setattr(obj, attr, value)

    def restore(self) -> None:
        for obj, attr, value in reversed(self._saved):
            setattr(obj, attr, value)
        self._saved = []

    def __enter__(self) -> "strict_cudagraphs":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


# ---------------------------------------------------------------------------- Mega-Cache
def mega_cache_unavailable() -> str | None:
    """None when torch has the Mega-Cache API, else why not."""
    missing = [f for f in ("save_cache_artifacts", "load_cache_artifacts") if not hasattr(torch.compiler, f)]
    return f"torch.compiler lacks {', '.join(missing)} (Mega-Cache needs torch >= 2.7)" if missing else None


def _cache_info_summary(info: Any) -> dict:
    arts = getattr(info, "artifacts", None)
    if isinstance(arts, dict):
        return {str(k): len(v) for k, v in arts.items()}
    return {"info": str(info)}


def save_mega_cache(path: str | os.PathLike) -> dict | None:
    """Write this process's compile artifacts to ``path`` atomically; None if there were none."""
    why = mega_cache_unavailable()
    if why:
        raise RuntimeError(f"cannot save Mega-Cache: {why}")
    result = torch.compiler.save_cache_artifacts()
    if result is None:
        return None
    data, info = result
    write_bytes(path, data)  # atomic: a reader never sees a half-written cache
    return {"path": str(path), "bytes": len(data), "artifacts": _cache_info_summary(info)}


def load_mega_cache(path: str | os.PathLike) -> dict:
    """Load a Mega-Cache written by :func:`save_mega_cache` into this process's compile caches."""
    why = mega_cache_unavailable()
    if why:
        raise RuntimeError(f"cannot load Mega-Cache: {why}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Mega-Cache file {path} does not exist; write it first with save_mega_cache "
                                "after a cold compile (the bench's cold run does), or start cold")
    data = path.read_bytes()
    if not data:
        raise ValueError(f"Mega-Cache file {path} is empty; delete it and save a new one after a cold compile")
    info = torch.compiler.load_cache_artifacts(data)
    if info is None:
        raise ValueError(f"Mega-Cache file {path} is corrupt or from an incompatible torch (torch could not "
                         "deserialize it); delete it and save a new one after a cold compile")
    return {"path": str(path), "bytes": len(data), "artifacts": _cache_info_summary(info)}

