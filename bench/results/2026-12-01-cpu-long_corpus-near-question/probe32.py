"""How this record looked at one layout (a record of the probe, not a tool): for honest-grid documents of draw 581129 at
32x the window and depth 0.98, the answer of `focused`, `oracle` and `compressed`, the layout after each refocus
(runs of entries at one LOD, from token 3500 on) and the focused refocus's kept path, fits and edits.
Usage (from the repository root): python probe32.py RUN_DIR DOCS TASK [OVERRIDES...], e.g.
python probe32.py runs/lc_s58 5,6,7 multi_needle allocator.inference.anchor_path=true"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))
from mc.build import load_run  # noqa: E402
from mc.data.hf_tokenizer import tokenizer_for  # noqa: E402
from mc.data.loader import corpus_haystack  # noqa: E402
from mc.data.long_tasks import make_long_doc  # noqa: E402
from mc.eval.draws import draw_seed  # noqa: E402
from mc.eval.focus_policies import oracle_refocus  # noqa: E402
from mc.eval.long_range import SEED_OFFSET, _answer, sweep_tasks  # noqa: E402
from mc.eval.read_budget import at_budget  # noqa: E402
run = sys.argv[1]; docs = [int(x) for x in sys.argv[2].split(",")]; task = sys.argv[3]
over = ["eval.draw_seed=581129", "eval.long_range.depth_jitter=0"] + sys.argv[4:]
ctrl, _tok = load_run(run, overrides=over); cfg = ctrl.cfg
ctrl, cfg = at_budget(ctrl, cfg, cfg.eval.long_range.budget)
tok = tokenizer_for(cfg.model); hay = corpus_haystack(cfg.data, "val", tok)
rc = cfg.data.recall; lr = cfg.eval.long_range
tasks = sweep_tasks(cfg)
for k in docs:
    t, template = tasks[task]
    seed = SEED_OFFSET + draw_seed(cfg) * 10_000 + k
    doc = make_long_doc(t, 4096, 0.98, seed, key_len=rc.key_len, value_len=rc.value_len, n_needles=lr.n_needles, tokenizer=tok,
                        template=template or rc.templates[k % len(rc.templates)], haystack=hay, near_decoys=rc.near_decoys,
                        exclude=[rc.eval_template] if rc.eval_template else ())
    start = ctrl.begin_session(doc.ids[:-rc.value_len]).snapshot()
    truth = doc.ids[-rc.value_len:]
    print(f"doc {k} answer {doc.answer} needle {doc.queried_span} spans {doc.record_spans} keys {doc.keys} values {doc.values}")
    for variant in ("focused", "oracle", "compressed"):
        said, edits, lod = _answer(ctrl, start, truth, variant, 0, doc.queried_span, torch.Generator().manual_seed(1), (doc.query_start, doc.ids.numel() - rc.value_len))
        ctrl.session.restore(start)
        if variant == "focused":
            rec = ctrl.refocus()
        elif variant == "oracle":
            oracle_refocus(ctrl, doc.queried_span)
        wc = ctrl.session.wc
        runs = []
        for i in range(len(wc)):
            lo_, hi_ = wc.span(i); l = wc[i][0]
            if runs and runs[-1][0] == l and runs[-1][2] == lo_:
                runs[-1][2] = hi_; runs[-1][3] += 1
            else:
                runs.append([l, lo_, hi_, 1])
        print(f"  {variant:10s} said {tok.decode(said)!r} edits {edits} lod {lod} entries {len(wc)}", " ".join(f"L{l}[{a},{b})x{n}" for l, a, b, n in runs if b > 3500 or l == 0))
        if variant == "focused":
            print("     record", rec.branch, rec.branch_fits, [ (e.kind, e.entry) for e in rec.edits])
