"""Evaluation: does LensNet-driven focus beat simple baselines at the same working-context budget?

``run_evaluation(cfg, run_dir)`` loads the trained nets (base from ``stage1/base.pt``, GistNet and
LensNet from ``stage2/ckpt.pt``), takes held-out documents of ``eval.doc_tokens`` tokens (longer
than the budget ``B = mc.max_entries``): windows of validation-split corpus documents and
validation-seed recall documents, and compares four ways of reading each one:

(a) ``full``: the base model over the whole document at LOD0, or, when the document is longer
    than ``model.max_seq_len``, over its last ``max_seq_len`` tokens (labelled as such);
(b) ``recency``: the base model over the last ``B`` tokens at LOD0;
(c) ``compressed``: a controller session over the prefix that ends right before the scored tokens
    (``begin_session``: ``WorkingContext.build(fill=True)`` at the budget: LOD0 recent tail, gists
    for the rest, recency-graded), no refocus;
(d) ``focused``: the same session, then one controller refocus (up to ``allocator.inference.iterations``
    LensNet-driven allocator iterations within the refocus's edit budget);
(e) ``random``: the same session, then a refocus with uniformly random scores through the same
    allocator, stopped after exactly as many edits as (d) made on that document (the control that
    shows whether LensNet's scores matter, not the edit count; :mod:`mc.eval.focus_policies`).

For (c) and (d) the scored tokens (the tail, or the recall answer) are then appended through the
controller at LOD0 without refocus, exactly as a streaming session appends: when the budget is
full the session collapses sibling groups first (oldest first, never a group the refocus just
changed while its cooldown runs; if that leaves only the group just before the scored tokens, its
gist cannot predict the first of them, which is then not scored), so the final working context never holds more than ``B``
entries, the number the recency window holds. (c) and (d) differ only by the refocus, and LensNet
never sees the tokens it is scored on.

Metrics (per document, then mean and 95% CI over documents, see :mod:`mc.eval.stats`): next-token loss
of the last ``eval.tail_tokens`` tokens (teacher forced), on corpus and recall documents, read in one chunk
(``*_tail_loss``, as above) and, with ``eval.stream_tail``, token by token as a session reads it
(``*_stream_loss``, :mod:`mc.eval.streamed`: each token under what the budget holds right before it), and with
``eval.session_tail`` the document's last tokens read by a session that refocuses every ``refocus_interval`` tokens
(``*_session_loss``, :mod:`mc.eval.session_read`); on recall documents
the exact recall of the queried value by greedy decoding of ``value_len`` tokens after the query, and the
teacher-forced loss of those value tokens. All GistNet/LensNet use goes through the controller.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from mc.config import RunConfig, to_dict
from mc.controller import MCController
from mc.data.hf_tokenizer import tokenizer_for
from mc.eval.baselines import lod0_answer, lod0_tail_loss
from mc.eval.draws import draw_seed
from mc.eval.eval_docs import EvalDoc, corpus_eval_docs, recall_eval_docs
from mc.eval.focus_policies import Focus, prefix_session, random_focus_for
from mc.eval.record_rank import record_rank
from mc.eval.session_read import session_losses
from mc.eval.task_suite import run_sweeps
from mc.eval.stats import mean_ci, paired_diff_ci, proportion_ci
from mc.eval.streamed import lod0_stream_loss, wc_stream_loss
from mc.io import write_json
from mc.refocus import refocus_edit_budget
from mc.train.checkpoint import load_finite_checkpoint

VARIANTS = ("full", "recency", "compressed", "focused", "random")
PAIRS = (("focused", "recency"), ("focused", "compressed"), ("focused", "random"), ("compressed", "recency"))
METRICS = ("corpus_tail_loss", "recall_tail_loss", "corpus_stream_loss", "recall_stream_loss", "corpus_session_loss",
           "recall_session_loss", "recall_answer_nll", "recall_accuracy")
N_LOD_MAPS = 3  # working contexts per source whose layout before/after refocus is kept for the report


# ----------------------------------------------------------------------------- loading


def _eval_config(cfg: RunConfig) -> RunConfig:
    """The config the evaluation controller runs: training compile modes off (no train warm-up)."""
    ecfg = copy.deepcopy(cfg)
    ecfg.compile.lensnet.train = "off"
    ecfg.compile.gistnet.train = "off"
    return ecfg


def load_trained_controller(cfg: RunConfig, run_dir: str | Path, *, device: torch.device | None = None,
                            telemetry_dir: str | Path | None = None) -> MCController:
    """Controller with the stage-1 base and the stage-2 GistNet/LensNet of ``run_dir``.

    Accepts a stage-2 checkpoint holding ``{"controller": state}`` or the controller state itself
    (``{"gistnet": ..., "lensnet": ...}``). Raises FileNotFoundError naming the missing stage.
    """
    from mc.build import build_controller, stage1_base_path  # noqa: PLC0415 - keeps `import mc.eval` light

    run_dir = Path(run_dir)
    base_path, aux_path = stage1_base_path(cfg, run_dir), run_dir / "stage2" / "ckpt.pt"
    if base_path is not None and not base_path.is_file():
        raise FileNotFoundError(f"evaluation needs the stage-1 base model at {base_path}; run stage 1 first "
                                "(bash run10.sh --stages=stage1)")
    if not aux_path.is_file():
        raise FileNotFoundError(f"evaluation needs the stage-2 GistNet/LensNet checkpoint at {aux_path}; run stage 2 "
                                "first (bash run10.sh --stages=stage2)")
    ctrl = build_controller(cfg, device=device, base_weights=base_path, run_dir=telemetry_dir)
    ckpt = load_finite_checkpoint(aux_path, fix="re-run stage 2 (delete that file first)")
    state = ckpt.get("controller", ckpt)
    if not isinstance(state, dict) or "gistnet" not in state or "lensnet" not in state:
        keys = sorted(ckpt)
        raise ValueError(f"{aux_path} holds no controller state (expected a 'controller' entry with 'gistnet' and "
                         f"'lensnet', found {keys}); re-run stage 2")
    ctrl.load_state_dict(state)
    for m in (ctrl.base, ctrl.gistnet, ctrl.lensnet):
        m.eval()
    return ctrl


# ----------------------------------------------------------------------------- WC variants (c) and (d)


def _scored_logits(ctrl: MCController, n_scored: int, expect: Tensor) -> tuple[Tensor, Tensor]:
    """Base-model logits predicting the session's last ``n_scored`` tokens, and those tokens."""
    s = ctrl.session
    mwc = s.materialize()
    L = mwc.length
    logits = ctrl.base_logits(mwc.embeds[None], mwc.positions[None], mwc.lods[None], mwc.mask[None])[0]  # [bucket, V]
    if bool((mwc.lods[L - n_scored: L] != 0).any()):
        raise RuntimeError("evaluation bug: the scored tokens must be LOD0 entries")
    tgt = mwc.token_ids[L - n_scored: L]
    if not torch.equal(tgt.cpu(), expect.cpu()):
        raise RuntimeError("evaluation bug: the working context's last entries are not the scored tokens")
    if bool(mwc.lods[L - n_scored - 1] != 0):  # the append collapsed the predecessor (all older groups in
        return logits[L - n_scored: L - 1].float(), tgt[1:]  # cooldown): a gist predicts nothing, drop token 1
    return logits[L - n_scored - 1: L - 1].float(), tgt


@torch.no_grad()
def wc_tail_loss(ctrl: MCController, ids: Tensor, *, tail: int, focus: Focus, stream: bool = False) -> dict:
    """Variant (c)/(d) tail loss: WC over ``ids[:-tail]`` (+ refocus), tail appended at LOD0 in one chunk.

    ``stream``: also ``stream_loss``, the same tail read token by token from the same refocused session
    (:func:`mc.eval.streamed.wc_stream_loss`; a snapshot, so the refocus is made once)."""
    s, before, edits = prefix_session(ctrl, ids[:-tail], focus=focus)
    after = s.wc.entries
    snap = s.snapshot() if stream else None
    ctrl.append(ids[-tail:], refocus=False)  # the session makes room (collapses) within the budget
    logits, tgt = _scored_logits(ctrl, tail, ids[-tail:])
    out = {"loss": float(F.cross_entropy(logits, tgt)), "entries": len(s.wc), "edits": edits,
           "before": before, "after": after}
    if stream:
        s.restore(snap)
        out["stream_loss"] = wc_stream_loss(ctrl, ids[-tail:])
    return out


@torch.no_grad()
def wc_recall(ctrl: MCController, ids: Tensor, *, value_len: int, focus: Focus) -> dict:
    """Variant (c)/(d) recall: greedy decode of ``value_len`` tokens after the query through the
    controller, and (in a second, identical session) the teacher-forced loss of the value."""
    prompt, answer = ids[:-value_len], ids[-value_len:]
    gen_state = focus.generator.get_state() if focus.generator is not None else None
    s, before, edits = prefix_session(ctrl, prompt, focus=focus)
    after = s.wc.entries
    out = []
    for _ in range(value_len):  # no refocus while answering: the layout chosen at the query stands
        tok = int(ctrl.next_token_logits().argmax())
        out.append(tok)
        ctrl.append(torch.tensor([tok]), refocus=False)
    entries = len(s.wc)
    if focus.generator is not None:  # the teacher-forced pass must see the same random edits
        focus = Focus(focus.kind, focus.n_edits, torch.Generator().set_state(gen_state), focus.span)
    prefix_session(ctrl, prompt, focus=focus)
    ctrl.append(answer, refocus=False)
    logits, tgt = _scored_logits(ctrl, value_len, answer)
    return {"nll": float(F.cross_entropy(logits, tgt)), "exact": out == answer.tolist(), "predicted": out,
            "entries": entries, "edits": edits, "before": before, "after": after}


# ----------------------------------------------------------------------------- the evaluation


def _lod_map_record(doc: EvalDoc, num_tokens: int, before: list, after: list, cfg: RunConfig, what: str) -> dict:
    rec = {"source": doc.source, "doc": doc.name, "what": what, "num_tokens": num_tokens,
           "block_size": cfg.mc.block_size, "max_lod": cfg.mc.max_lod,
           "before": [list(e) for e in before], "after": [list(e) for e in after], "highlights": []}
    if doc.recall is not None:
        r = doc.recall
        rec["highlights"] = [{"label": "queried record", "span": list(r.queried_span)},
                             {"label": "query", "span": [r.query_start, r.answer_span[0]]}]
    return rec


def _show(ids: list[int], tok=None) -> str:
    """Decoded ids for the report: printable ASCII as is, anything else as an escape (model=hf: its tokenizer's text)."""
    if tok is not None and not tok.byte_level:
        return tok.decode(ids).encode("unicode_escape").decode("ascii")
    return "".join(chr(t) if 32 <= t < 127 else (f"\\x{t:02x}" if t < 256 else f"<{t}>") for t in ids)


def _summarise(per_doc: list[dict]) -> tuple[dict, dict]:
    metrics: dict[str, dict] = {}
    paired: dict[str, dict] = {}
    for metric in METRICS:
        rows = [d["values"][metric] for d in per_doc if metric in d["values"]]
        if not rows:  # eval.stream_tail or eval.session_tail off: no such rows
            continue
        ci = proportion_ci if metric == "recall_accuracy" else mean_ci
        metrics[metric] = {v: ci([float(r[v]) for r in rows]) for v in VARIANTS}
        paired[metric] = {f"{a}-{b}": paired_diff_ci([float(r[a]) for r in rows], [float(r[b]) for r in rows])
                          for a, b in PAIRS}
    return metrics, paired


def evaluate_docs(ctrl: MCController, cfg: RunConfig, docs: list[EvalDoc], *, progress: bool = False) -> dict:
    """Score every document under the four variants; per-document rows, summaries and LOD maps."""
    mc, ev = cfg.mc, cfg.eval
    B, T, vl = mc.max_entries, ev.tail_tokens, cfg.data.recall.value_len
    full_window, stream = cfg.model.max_seq_len, ev.stream_tail
    base, tok = ctrl.base, tokenizer_for(cfg.model)
    per_doc, lod_maps = [], []
    kept = {"corpus": 0, "recall": 0}
    try:
        from tqdm import tqdm  # noqa: PLC0415
        bar = tqdm(total=len(docs), desc="eval", disable=not progress, leave=False)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        bar = None
    for doc in docs:
        n = doc.ids.numel()
        if n <= B:
            raise ValueError(f"evaluation document {doc.name} has {n} tokens, not more than the budget "
                             f"mc.max_entries={B}; raise eval.doc_tokens")
        row = {"source": doc.source, "doc": doc.name, "num_tokens": n, "values": {}, "entries": {}}
        c = wc_tail_loss(ctrl, doc.ids, tail=T, focus=Focus("none"), stream=stream)
        d = wc_tail_loss(ctrl, doc.ids, tail=T, focus=Focus("lensnet"), stream=stream)
        e = wc_tail_loss(ctrl, doc.ids, tail=T, focus=random_focus_for(cfg, doc.name, d["edits"]), stream=stream)
        full = lod0_tail_loss(base, doc.ids, window=min(n, full_window), tail=T)
        row["values"][f"{doc.source}_tail_loss"] = {
            "full": full, "recency": lod0_tail_loss(base, doc.ids, window=B, tail=T),
            "compressed": c["loss"], "focused": d["loss"], "random": e["loss"]}
        if stream:  # each tail token under what the budget holds right before it (recency: a sliding window)
            row["values"][f"{doc.source}_stream_loss"] = {  # within the window, teacher forcing is streaming
                "full": full if n <= full_window else lod0_stream_loss(base, doc.ids, window=full_window, tail=T),
                "recency": lod0_stream_loss(base, doc.ids, window=B, tail=T),
                "compressed": c["stream_loss"], "focused": d["stream_loss"], "random": e["stream_loss"]}
        row["entries"]["tail"] = {"full": min(n, full_window), "recency": B, "compressed": c["entries"],
                                  "focused": d["entries"], "random": e["entries"]}
        row["edits"] = {"tail": d["edits"]}
        row["random_edits"] = {"tail": e["edits"]}
        if ev.session_tail:  # the last session_tail tokens as a decoding session reads them, refocusing on schedule
            sr = session_losses(ctrl, cfg, doc.ids, doc.name)
            row["values"][f"{doc.source}_session_loss"] = sr["values"]
            row["session_edits"] = sr["edits"]
            row["session_checks"] = sr["checks"]
        if doc.recall is not None:
            rc = wc_recall(ctrl, doc.ids, value_len=vl, focus=Focus("none"))
            rd = wc_recall(ctrl, doc.ids, value_len=vl, focus=Focus("lensnet"))
            re_ = wc_recall(ctrl, doc.ids, value_len=vl, focus=random_focus_for(cfg, doc.name, rd["edits"]))
            fa = lod0_answer(base, doc.ids, window=min(n, full_window), value_len=vl)
            rb = lod0_answer(base, doc.ids, window=B, value_len=vl)
            by_variant = (("full", fa), ("recency", rb), ("compressed", rc), ("focused", rd), ("random", re_))
            row["values"]["recall_answer_nll"] = {k: r["nll"] for k, r in by_variant}
            row["values"]["recall_accuracy"] = {k: r["exact"] for k, r in by_variant}
            row["predicted"] = {"answer": doc.recall.answer, **{k: _show(r["predicted"], tok) for k, r in by_variant}}
            row["entries"]["recall"] = {"full": min(n, full_window), "recency": B, "compressed": rc["entries"],
                                        "focused": rd["entries"], "random": re_["entries"]}
            row["edits"]["recall"] = rd["edits"]
            row["random_edits"]["recall"] = re_["edits"]
            if kept["recall"] < N_LOD_MAPS:
                lod_maps.append(_lod_map_record(doc, n - vl, rd["before"], rd["after"], cfg, "recall prompt"))
                kept["recall"] += 1
        elif kept["corpus"] < N_LOD_MAPS:
            lod_maps.append(_lod_map_record(doc, n - T, d["before"], d["after"], cfg, "prefix before the tail"))
            kept["corpus"] += 1
        per_doc.append(row)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    metrics, paired = _summarise(per_doc)
    return {"per_doc": per_doc, "metrics": metrics, "paired": paired, "lod_maps": lod_maps}


def _variant_labels(cfg: RunConfig) -> dict:
    n, msl, B = cfg.eval.doc_tokens, cfg.model.max_seq_len, cfg.mc.max_entries
    inf = cfg.allocator.inference
    full = (f"(a) full context: all {n} tokens at LOD0" if n <= msl else
            f"(a) full context truncated to the base model's context: last {msl} of {n} tokens at LOD0 "
            "(the whole document is longer than model.max_seq_len)")
    return {"full": full,
            "recency": f"(b) recency only: last {B} tokens at LOD0",
            "compressed": f"(c) compressed, no focus: <= {B} entries (LOD0 tail + gists, WorkingContext.build fill=True)",
            "focused": (f"(d) LensNet-focused: (c) + one refocus of <= {inf.iterations} allocator "
                        f"iterations (<= {inf.max_edits} edits each, <= {refocus_edit_budget(inf)} "
                        f"in all, policy {cfg.allocator.policy})"),
            "random": "(e) random control: (c) + as many edits as (d) made, from uniformly random scores"}


def run_evaluation(cfg: RunConfig, run_dir: str | Path, *, progress: bool = True, max_files: int | None = None) -> dict:
    """Evaluate the run in ``run_dir``; writes ``run_dir/eval/eval.json`` and returns its content.

    ``max_files`` caps the stdlib corpus scan (tests and quick runs).
    """
    from mc.build import resolve_device  # noqa: PLC0415
    from mc.compile.boundary import unfreeze  # noqa: PLC0415

    run_dir = Path(run_dir)
    ev = cfg.eval
    t0 = time.time()
    ecfg = _eval_config(cfg)
    device = resolve_device(cfg.train.device)
    ctrl = load_trained_controller(ecfg, run_dir, device=device, telemetry_dir=run_dir)
    corpus, corpus_note = corpus_eval_docs(cfg, ev.n_docs, ev.doc_tokens, max_files=max_files)
    docs = corpus + recall_eval_docs(cfg, ev.n_docs, ev.doc_tokens)
    compiled = ecfg.compile.is_on("inference")
    try:
        if compiled:
            ctrl.warmup()
        result = evaluate_docs(ctrl, ecfg, docs, progress=progress)
        result.update(run_sweeps(ctrl, ecfg, progress=progress), record_rank=record_rank(ctrl, docs))  # sweeps when on
    finally:
        if compiled:
            unfreeze(ctrl.telemetry.monitor)
    snap = ctrl.telemetry.snapshot()
    ctrl.telemetry.close()
    out = {
        "kind": "mc-eval",
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "preset": cfg.preset,
        "device": str(device),
        "torch": torch.__version__,
        "seconds": round(time.time() - t0, 2), "budget": cfg.mc.max_entries,
        "settings": {"n_docs": ev.n_docs, "doc_tokens": ev.doc_tokens, "tail_tokens": ev.tail_tokens,
                     "stream_tail": ev.stream_tail, "session_tail": ev.session_tail,
                     "refocus_interval": cfg.allocator.inference.refocus_interval,
                     "value_len": cfg.data.recall.value_len, "max_seq_len": cfg.model.max_seq_len, "draw_seed":
                     draw_seed(cfg), "draw_seed_set": cfg.eval.draw_seed is not None, "refocus": to_dict(cfg.allocator),
                     "compile_inference": {
                         "lensnet": ecfg.compile.lensnet.inference, "gistnet": ecfg.compile.gistnet.inference}},
        "ci": {"losses": "mean with a normal-approximation 95% interval over documents (sd ddof=1)",
               "accuracy": "share of documents with a Wilson score 95% interval",
               "paired": "per-document difference a-b, normal-approximation 95% interval"},
        "documents": {"corpus": corpus_note, "n_corpus": len(corpus), "n_recall": len(docs) - len(corpus)},
        "variants": _variant_labels(cfg),
        **result,
        "controller_calls": snap.get("calls", {}).get("totals"),
        "cudagraph": snap.get("cudagraph"),
    }
    write_json(run_dir / "eval" / "eval.json", out, indent=1)
    return out
