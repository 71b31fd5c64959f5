"""Which gist does each locator rank first on the task suite's starting layout? No decoding.

    PYTHONPATH=. python bench/results/2026-12-05-cpu-smollm2_cpu-overlap-runs/locator_probe.py RUN_DIR [TASK] [DRAW]

Documents as the suite makes them (draw DRAW, default the validation draw 20261129; 8 per depth bucket at 8x and
16x of W = 128). On the coarse layout a session over the prompt holds (before any refocus), per locator: is its
best-scored gist one over the queried needle (`hit`), one over a distractor needle (`decoy`, multi-key only), or
elsewhere. Locators: `lensnet` (the session's scores, what the refocus ranks), `net` (LensNet's logits without
the token index's term), `match` (the index's match alone), `salience` (the suite's non-learned rule).
"""
import sys
import zlib

import torch

from mc.build import load_run
from mc.data.loader import make_source
from mc.data.real_tasks import filler_window, make_task_doc
from mc.eval.focus_policies import salience_scores
from mc.eval.long_range import needle_depth
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import SEED_OFFSET
from mc.nets.token_index import session_match

run_dir = sys.argv[1]
task = sys.argv[2] if len(sys.argv) > 2 else "multikey"
draw = int(sys.argv[3]) if len(sys.argv) > 3 else 20261129
torch.set_grad_enabled(False)
ctrl, tok = load_run(run_dir, device="cpu")
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
ts = cfg.eval.tasks
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
W, K = cfg.mc.max_entries, cfg.mc.block_size
counts = {}
for mult in (8, 16):
    for depth in (0.1, 0.5, 0.9):
        for k in range(8):
            length = mult * W
            seed = SEED_OFFSET + draw * 10_000 + k
            cs = zlib.crc32(repr((task, length, round(depth, 6), seed)).encode())
            doc = make_task_doc(task, length, needle_depth(depth, ts.depth_jitter, seed), seed, tok,
                                filler_window(source, length, cs), n_keys=ts.n_keys, hops=ts.hops)
            ctrl.begin_session(doc.ids)
            s = ctrl.session
            mwc = s.materialize()
            n = len(s.wc)
            match = session_match(ctrl.lensnet.index, s, mwc, block_size=K, recent_tokens=cfg.mc.recent_tokens)
            total = ctrl.session_scores(s)[:n]
            logits = torch.atanh(total.clamp(-0.999999, 0.999999))
            net = logits - float(ctrl.lensnet.index_gain) * match[:n]
            sal = salience_scores(s, (doc.question_start, int(doc.ids.numel())))
            gists = [i for i in range(n) if s.wc[i][0] > 0]
            spans = [s.wc.span(i) for i in range(n)]

            def over(i, span):
                return spans[i][0] < span[1] and span[0] < spans[i][1]
            for name, sc in (("lensnet", total), ("net", net), ("match", match[:n]), ("salience", sal)):
                best = max(gists, key=lambda i: float(sc[i]))
                kind = ("hit" if over(best, doc.needle_spans[0])
                        else "decoy" if any(over(best, sp) for sp in doc.needle_spans[1:]) else "other")
                key = (name, mult, kind)
                counts[key] = counts.get(key, 0) + 1
for name in ("lensnet", "net", "match", "salience"):
    for mult in (8, 16):
        c = {kind: counts.get((name, mult, kind), 0) for kind in ("hit", "decoy", "other")}
        print(f"{task} {name:9s} {mult:2d}x  first gist over: queried {c['hit']:2d}  distractor {c['decoy']:2d}  "
              f"elsewhere {c['other']:2d}  (of 24)")
