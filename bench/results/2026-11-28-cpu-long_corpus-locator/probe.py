"""A record of the probe (not a tool): python probe.py RUN_DIR... with the repo on PYTHONPATH. For four 32x passkey
documents (corpus haystack, depth 0.5), read at 112 entries with room 32: LensNet's scores on the starting layout,
the needle gist's rank among the gists (0 = first) and the five best gists (LOD, first token)."""
import torch, sys
from mc.build import load_run
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack
from mc.data.hf_tokenizer import tokenizer_for
from mc.eval.read_budget import at_budget
from mc.eval.focus_policies import span_scores
for run in sys.argv[1:]:
    ctrl, _ = load_run(run, device="cpu", overrides=["mc.focus_room=32", "eval.long_range.budget=112"])
    ctrl, cfg = at_budget(ctrl, ctrl.cfg, 112)
    rc = cfg.data.recall
    hay = corpus_haystack(cfg.data, "val", tokenizer_for(cfg.model))
    print("==", run)
    for k in range(4):
        doc = make_long_doc("passkey", 4096, 0.5, 777+k, key_len=rc.key_len, value_len=rc.value_len, haystack=hay,
                            template=rc.templates[k % 4], near_decoys=rc.near_decoys)
        ctrl.begin_session(doc.ids[:-rc.value_len])
        s = ctrl.session
        with torch.no_grad():
            sc = ctrl._session_scores(s)
        wc = s.wc
        needle = span_scores(wc, *doc.queried_span) > 0
        gist = torch.tensor([wc[i][0] > 0 for i in range(len(wc))])
        order = sorted([i for i in range(len(wc)) if gist[i]], key=lambda i: -float(sc[i]))
        rank = [j for j, i in enumerate(order) if needle[i]]
        print(f"doc {k}: scores gists min {sc[gist].min():.3f} max {sc[gist].max():.3f} | tokens mean {sc[~gist].mean():.3f}"
              f" | needle gist rank {rank} of {len(order)} | top5 lods/pos {[(wc[i][0], wc.span(i)[0]) for i in order[:5]]}")
