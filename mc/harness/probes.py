"""Measuring tools of the compile harness: each one turns an observation into numbers.

:mod:`mc.harness.run` drives them; the compile scenarios in tests (``tests/_compile_scenarios.py``)
use the same tools, so there is one implementation of each probe. Kept apart from the
orchestration so each tool is small and testable on its own:

- :func:`device_label`: the device string a verdict is keyed on (the workflow compares it).
- :class:`RawSpy`: records the storage of every RAW compiled output, so the harness can prove
  that what a helper returned is a clone and not the compiled output itself (on CPU a raw output
  is never overwritten, so the value-based poison test alone cannot see an aliasing helper).
- :func:`make_mwc`: a materialised working context in a private buffer (own storage per call,
  for the poison test's calls A, B, C, D).
- :func:`max_rel_err` / :func:`worst_grad_err`: eager-parity metrics.
- :func:`finite_flag` / :func:`nonfinite`: a tracked tensor reduced to "all finite", and the names that were not.
- :func:`cuda_memory`: the memory numbers the "flat after warm-up" check compares.
- :func:`recompile_guards`: guard text out of a ``fail_on_recompile`` exception.
- :func:`net_calls`: the controller's net calls per ``"net/context"`` (telemetry counters).
- :func:`copy_weights`: makes an eager twin controller hold the compiled one's weights.
"""
from __future__ import annotations

import gc
import re
from typing import Any, Iterable

import torch
from torch import Tensor

from mc.working_context import MaterializedWC, WCBuffer


def device_label(device: torch.device | str) -> str:
    """``"cpu"`` or ``"cuda:<GPU name>"``: a verdict is only reused on the same kind of device."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(dev)}"
    return dev.type


# ----------------------------------------------------------------------------- aliasing
def storage_ptrs(obj: Any) -> set[int]:
    """Data pointers of the storages behind a tensor or a (nested) tuple/list of tensors."""
    if isinstance(obj, Tensor):
        return {obj.untyped_storage().data_ptr()}
    if isinstance(obj, (tuple, list)):
        out: set[int] = set()
        for o in obj:
            out |= storage_ptrs(o)
        return out
    return set()


class RawSpy:
    """Wraps ``CompiledNet.run`` of the controller's nets to remember the storage of the last raw output.

    Only integers are kept (never the tensors), so the spy does not change what stays alive. A
    helper's result is compared with the raw output *of the same call*, which was still alive when
    the helper cloned it: a real clone can never share its storage.
    """

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.last: dict[str, set[int]] = {}
        self._saved: list[tuple[Any, Any]] = []

    def install(self) -> "RawSpy":
        for net in (self.controller.compiled_lensnet, self.controller.compiled_gistnet):
            orig = net.run

            def spy(*args: Any, _orig=orig, _name=net.name, **kwargs: Any) -> Any:
                out = _orig(*args, **kwargs)
                self.last[_name] = storage_ptrs(out)
                return out

            self._saved.append((net, orig))
            net.run = spy  # instance attribute shadows the method; uninstall() deletes it
        return self

    def uninstall(self) -> None:
        for net, _ in self._saved:
            net.__dict__.pop("run", None)
        self._saved = []

    def aliased(self, net: str, returned: Tensor) -> bool:
        """True if ``returned`` shares storage with the last raw output of ``net``."""
        return bool(storage_ptrs(returned) & self.last.get(net, set()))


# ----------------------------------------------------------------------------- inputs
def make_mwc(size: int, length: int, dim: int, *, device: torch.device, generator: torch.Generator,
             max_lod: int = 0) -> MaterializedWC:
    """A working context padded to ``size`` with ``length`` real entries, in its OWN buffer."""
    if not 0 < length <= size:
        raise ValueError(f"make_mwc: length {length} must be in 1..size ({size})")
    buf = WCBuffer(size, dim, device=device)
    buf.embeds[:length] = torch.randn(length, dim, generator=generator).to(device)
    buf.mask[:length] = True
    buf.positions[:length] = torch.arange(length, dtype=torch.float32, device=device) * 2.0
    if max_lod > 0:
        buf.lods[: length // 2] = torch.randint(0, max_lod + 1, (length // 2,), generator=generator).to(device)
    return MaterializedWC(embeds=buf.embeds, mask=buf.mask, positions=buf.positions, lods=buf.lods,
                          token_ids=buf.token_ids, length=length, bucket=size)


def net_calls(controller: Any) -> dict[str, int]:
    """``{"lensnet/train": calls, ...}`` from the controller's telemetry counters (counted since their reset)."""
    totals = controller.telemetry.counters.snapshot()["totals"]
    return {f"{net}/{ctx}": totals[net][ctx]["calls"] for net in totals for ctx in totals[net]}


def copy_weights(src: Any, dst: Any) -> None:
    """Load ``src``'s base / GistNet / LensNet weights into controller ``dst`` (the eager twin)."""
    for name in ("base", "gistnet", "lensnet"):
        getattr(dst, name).load_state_dict(getattr(src, name).state_dict())


# ----------------------------------------------------------------------------- numbers
def max_rel_err(a: Tensor, b: Tensor) -> float:
    """max|a - b| / max(max|b|, 1e-6): a scale-free distance between a result and its reference."""
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))


def grads_of(module: torch.nn.Module, prefix: str) -> dict[str, Tensor]:
    """``{name: grad copy}`` of every trainable parameter (missing grads become zeros)."""
    out = {}
    for name, p in module.named_parameters():
        if p.requires_grad:
            out[f"{prefix}.{name}"] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return out


def worst_grad_err(got: dict[str, Tensor], ref: dict[str, Tensor]) -> tuple[float, str]:
    """The largest :func:`max_rel_err` over matching gradients, and its parameter name."""
    worst, where = 0.0, "-"
    for name, g in ref.items():
        err = max_rel_err(got[name], g) if name in got else float("inf")
        if err > worst:
            worst, where = err, name
    return worst, where


def finite_flag(t: Tensor) -> Tensor:
    """``t`` reduced to one on-device bool: all finite. The harness keeps this, not ``t``: keeping every tracked
    tensor (each round's gradient copies among them) grew device memory between rounds by the size of the
    aux nets' gradients, which the flat-memory check then counted (first GPU run, 2026-11-26)."""
    t = t.detach()
    return torch.isfinite(t).all() if t.is_floating_point() else torch.ones((), dtype=torch.bool, device=t.device)


def nonfinite(flags: Iterable[tuple[str, Tensor]]) -> list[str]:
    """Names whose :func:`finite_flag` is False (one host read per flag, at the end of the run)."""
    return [name for name, ok in flags if not bool(ok)]


def cuda_memory(device: torch.device) -> dict[str, int] | None:
    """Allocated / reserved bytes after a sync and a GC (None off CUDA)."""
    if torch.device(device).type != "cuda":
        return None
    gc.collect()
    torch.cuda.synchronize(device)
    return {"allocated": int(torch.cuda.memory_allocated(device)), "reserved": int(torch.cuda.memory_reserved(device))}


_GUARD = re.compile(r"Detected recompile.*", re.S)


def recompile_guards(text: str) -> str | None:
    """The guard-failure text of a ``fail_on_recompile`` / ``error_on_recompile`` exception, else None."""
    m = _GUARD.search(text) or (re.search(r"[Rr]ecompil.*", text, re.S) if "guard" in text.lower() else None)
    return " ".join(m.group(0).split())[:1500] if m else None
