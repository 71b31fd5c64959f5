"""In-window copy of a stage-1 base per template: teacher-forced argmax over the answer (== greedy exact match)."""
import json, sys, dataclasses, torch
from mc.config_loading import load_config
from mc.build import build_nets, load_base_weights
from mc.data.loader import corpus_haystack
from mc.data.recall import make_recall_doc, fit_recall

run = sys.argv[1]; templates = sys.argv[2].split("|"); n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
cfgd = json.load(open(f"{run}/config.json"))
preset = cfgd.get("preset", "long_corpus")
cfg = load_config([f"preset={preset}"])
base, _, _ = build_nets(cfg, torch.device("cpu"))
load_base_weights(base, f"{run}/stage1/base.pt"); base.eval()
hay = corpus_haystack(cfg.data, "val")
rc = fit_recall(dataclasses.replace(cfg.data.recall, doc_tokens=cfg.model.max_seq_len, templates=list(cfg.data.recall.templates)), cfg.model.max_seq_len)
out = {}
for t in templates:
    ok = 0
    for i in range(n):
        d = make_recall_doc(rc, 900000 + i, haystack=hay, template=t)
        with torch.no_grad():
            lg = base(d.ids[None])[0]
        a0, a1 = d.answer_span
        pred = lg[a0 - 1:a1 - 1].argmax(-1)
        ok += bool((pred == d.ids[a0:a1]).all())
    out[t] = ok
    print(f"{t!r}: {ok}/{n}", flush=True)
