"""A record of the probe behind probe.txt (not a tool), run from the repository root:
python probe.py RUN_DIR DRAW MULTIPLE DEPTH DOCS (e.g. runs/lc1536 424242 32 0.98 0,1,2,3,4,5,6,7).
Per document of that cell: the needle's span, the question's start, the five raw tokens LensNet scores highest (the
recent tail included), its three best gists and the rank of the needle's gists among all gists, on the starting
layout, before any refocus."""
import json, sys, torch
torch.set_num_threads(1)
from mc.build import load_run
from mc.eval import long_range as L
from mc.eval.read_budget import at_budget
from mc.data.loader import corpus_haystack
from mc.data.long_tasks import make_long_doc
run, draw, mult, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ctrl, tok = load_run(run, overrides=[f"eval.draw_seed={draw}", "eval.long_range.depth_jitter=0"])
cfg = ctrl.cfg
ctrl, cfg = at_budget(ctrl, cfg, cfg.eval.long_range.budget)
hay = corpus_haystack(cfg.data, "val", tok)
tasks = L.sweep_tasks(cfg); rc = cfg.data.recall; lr = cfg.eval.long_range
for name,(task,template) in tasks.items():
    for k in [int(x) for x in sys.argv[5].split(",")]:
        length = mult * cfg.model.max_seq_len
        seed = L.SEED_OFFSET + L.draw_seed(cfg) * 10_000 + k
        doc = make_long_doc(task, length, depth, seed, key_len=rc.key_len, value_len=rc.value_len, n_needles=lr.n_needles,
                            tokenizer=tok, template=template or rc.templates[k % len(rc.templates)], haystack=hay,
                            near_decoys=rc.near_decoys, exclude=[rc.eval_template] if rc.eval_template else ())
        ctrl.begin_session(doc.ids[:-rc.value_len])
        s = ctrl.session
        wc = s.wc
        sc = ctrl.session_scores(s)[:len(wc)].tolist()
        span = doc.queried_span
        cov = [i for i in range(len(wc)) if wc.span(i)[0] < span[1] and wc.span(i)[1] > span[0]]
        gists = sorted((i for i in range(len(wc)) if wc[i][0] > 0), key=lambda i: -sc[i])
        rank = {i: r for r, i in enumerate(gists)}
        n_lod = {}
        for i in range(len(wc)): n_lod[wc[i][0]] = n_lod.get(wc[i][0], 0) + 1
        raw = sorted((i for i in range(len(wc)) if wc[i][0] == 0), key=lambda i: -sc[i])
        print(name, k, "span", span, "q", doc.query_start, "raw top5", [(wc[i][1], round(sc[i],2)) for i in raw[:5]], "gist top3", [(wc[i], round(sc[i],2)) for i in gists[:3]], "needle gist rank", [rank.get(i) for i in cov if wc[i][0]>0])
        continue
        print(name, k, "span", span, "len", s.num_tokens, "entries", len(wc), "lods", dict(sorted(n_lod.items())),
              "| needle entries", [(wc[i][0], wc.span(i), round(sc[i], 3), rank.get(i)) for i in cov],
              "| top3", [(wc[i][0], wc.span(i), round(sc[i], 3)) for i in gists[:3]],
              "| branch", rec.branch, "edits", [(e.kind, e.entry) for e in rec.edits], "final lod", L.needle_lod(s.wc, span), "fits", [round(f,2) for f in rec.branch_fits])
