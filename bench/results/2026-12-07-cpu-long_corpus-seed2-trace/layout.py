"""One honest-grid document read three ways (focused, salience, oracle) and once more as focused with the block after
the record opened: the answer, the needle's LOD and the layout within 96 tokens of the record. Usage (from the
repository root): python layout.py RUN_DIR DRAW MULTIPLE DEPTH DOC [TASK] [PROMPT_MARGIN]
(PROMPT_MARGIN overrides allocator.inference.prompt_margin, for runs whose config.json predates it)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))
from mc.build import load_run  # noqa: E402
from mc.data.loader import corpus_haystack  # noqa: E402
from mc.data.long_tasks import make_long_doc  # noqa: E402
from mc.eval.focus_policies import oracle_refocus, salience_refocus  # noqa: E402
from mc.eval.long_range import SEED_OFFSET, needle_lod  # noqa: E402
from mc.eval.read_budget import at_budget  # noqa: E402

torch.set_num_threads(2)
run, draw, mult, depth, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
task = sys.argv[6] if len(sys.argv) > 6 else "passkey"
ctrl, tok = load_run(run)
if len(sys.argv) > 7:
    ctrl.cfg.allocator.inference.prompt_margin = float(sys.argv[7])
ctrl, cfg = at_budget(ctrl, ctrl.cfg, ctrl.cfg.eval.long_range.budget)  # the sweep's 112 entries, as mc_eval reads
rc = cfg.data.recall
seed = SEED_OFFSET + draw * 10_000 + k  # the grid's document k of this draw (mc.eval.long_range._DocReader)
doc = make_long_doc(task, mult * cfg.model.max_seq_len, depth, seed, key_len=rc.key_len, value_len=rc.value_len,
                    n_needles=cfg.eval.long_range.n_needles, tokenizer=tok, template=rc.templates[k % len(rc.templates)],
                    haystack=corpus_haystack(cfg.data, "val", tok), near_decoys=rc.near_decoys,
                    exclude=[rc.eval_template] if rc.eval_template else ())
a, b = doc.queried_span
print(f"{run}: {task} {mult}x depth {depth} doc {k}, record tokens [{a}, {b}), answer {doc.answer!r}, "
      f"text {tok.decode(doc.ids[a - 8:b + 8])!r}")
start = ctrl.begin_session(doc.ids[:-rc.value_len]).snapshot()
truth = doc.ids[-rc.value_len:]


def near_layout(wc) -> str:
    """The entries within 96 tokens of the record, runs of LOD0 tokens joined."""
    out, raw = [], None
    for i in range(len(wc)):
        lod, (x, y) = wc[i][0], wc.span(i)
        if y <= a - 96 or x >= b + 96:
            continue
        if lod == 0 and raw is not None and raw[1] == x:
            raw = (raw[0], y)
            continue
        if raw is not None:
            out.append(f"raw[{raw[0]}:{raw[1]}]")
            raw = None
        if lod == 0:
            raw = (x, y)
        else:
            out.append(f"L{lod}[{x}:{y}]")
    return " ".join(out + ([f"raw[{raw[0]}:{raw[1]}]"] if raw else []))


def answer(name: str) -> None:
    wc = ctrl.session.wc
    layout, lod = near_layout(wc), needle_lod(wc, (a, b))
    said = []
    for _ in range(truth.numel()):  # greedy, no refocus while answering, as the sweep reads
        t = int(ctrl.next_token_logits().argmax())
        said.append(t)
        ctrl.append(torch.tensor([t]), refocus=False)
    print(f"  {name:14s} said {tok.decode(said)!r}, needle LOD {lod}: {layout}")


for variant in ("focused", "salience", "oracle", "focused+after"):
    ctrl.session.restore(start)
    if variant.startswith("focused"):
        r = ctrl.refocus()
        if variant == "focused":
            print(f"  refocus: branch {r.branch}, edits {[(e.kind, e.entry) for e in r.edits]}")
        else:  # open the gist that starts where the record ends, paying with gist groups or raw blocks far after it
            wc = ctrl.session.wc
            while (i := next((i for i in range(len(wc)) if wc.span(i)[0] == b and wc[i][0] > 0), None)) is not None:
                if len(wc) + wc.block_size - 1 > wc.max_entries:
                    wc.collapse([j for j in wc.collapsible() if b + 16 <= wc.span(j)[0] and wc.span(j)[1] < wc.tail_start()][-1])
                    i = next(i for i in range(len(wc)) if wc.span(i)[0] == b)
                wc.expand(i)
    elif variant == "salience":
        salience_refocus(ctrl, (doc.query_start, doc.ids.numel() - rc.value_len))
    else:
        oracle_refocus(ctrl, (a, b))
    answer(variant)
