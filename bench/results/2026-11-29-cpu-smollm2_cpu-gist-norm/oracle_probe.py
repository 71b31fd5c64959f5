"""Why does SmolLM2 miss a needle the oracle layout holds raw? Per passkey document of the task suite (W = 128):
full, oracle (the session), raw-only (the oracle layout's LOD0 tokens alone, in order, at positions 0..n-1: no gists),
and the norms of the gists' embeddings against the tokens'."""
import json, sys, time, zlib, statistics
import torch
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.data.real_tasks import ANSWER_TOKENS, filler_window, make_task_doc, string_match_all
from mc.eval.focus_policies import multi_span_oracle_refocus
from mc.eval.long_range import needle_depth
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import SEED_OFFSET, plain_greedy, session_greedy
torch.set_num_threads(2)
run, draw, n_per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mults = [int(x) for x in sys.argv[4].split(",")]
ctrl, _ = load_run(run)
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
tok = tokenizer_for(cfg.model)
source = make_source(cfg.data, "val", tokenizer=tok)
budget = cfg.mc.max_entries
eos = getattr(tok, "eos_id", None)
rows = []
t0 = time.time()
for mult in mults:
    for depth in (0.1, 0.5, 0.9):
        for k in range(n_per):
            length = mult * budget
            seed = SEED_OFFSET + draw * 10_000 + k
            cell_seed = zlib.crc32(repr(("passkey", length, round(depth, 6), seed)).encode())
            doc = make_task_doc("passkey", length, needle_depth(depth, 0.05, seed), seed, tok,
                                filler_window(source, length, cell_seed))
            n_new = ANSWER_TOKENS["passkey"]
            r = {"mult": mult, "depth": depth, "k": k, "answers": list(doc.answers)}
            out = plain_greedy(ctrl.base, doc.ids, n_new, eos_id=eos)
            r["full"] = string_match_all(tok.decode(out), doc.answers)
            ctrl.begin_session(doc.ids)
            s = ctrl.session
            question = (doc.question_start, int(doc.ids.numel()))
            multi_span_oracle_refocus(ctrl, [doc.needle_spans[0]], core=[doc.answer_spans[0]], question=question)
            entries = list(s.wc.entries)
            snap = s.snapshot()
            raw = [idx for lod, idx in entries if lod == 0]
            mwc = s.materialize()
            emb = mwc.embeds[: mwc.length]
            lods = torch.tensor([lod for lod, _ in entries])
            norms = emb.float().norm(dim=-1)
            r["n_entries"], r["n_raw"], r["n_gists"] = len(entries), len(raw), int((lods > 0).sum())
            r["gist_norm"] = float(norms[lods > 0].mean()) if (lods > 0).any() else None
            r["tok_norm"] = float(norms[lods == 0].mean())
            r["gist_lods"] = sorted(set(int(x) for x in lods.tolist() if x > 0))
            # where the gists sit: how many gists between the needle's last raw token and the tail
            r["oracle_text"] = tok.decode(session_greedy(ctrl, n_new, eos_id=eos))
            r["oracle"] = string_match_all(r["oracle_text"], doc.answers)
            # the same layout with every gist rescaled to the tokens' mean norm (direction kept)
            target = r["tok_norm"]
            s.restore(snap)
            for lod in range(1, s.tree.max_lod + 1):
                lvl = s.tree.level(lod)
                if lvl.numel():
                    lvl.mul_(target / lvl.float().norm(dim=-1, keepdim=True).clamp_min(1e-6))
            r["rescaled_text"] = tok.decode(session_greedy(ctrl, n_new, eos_id=eos))
            r["rescaled"] = string_match_all(r["rescaled_text"], doc.answers)
            ids_raw = doc.ids[torch.tensor(raw)]
            out = plain_greedy(ctrl.base, ids_raw, n_new, eos_id=eos)
            r["raw_only_text"] = tok.decode(out)
            r["raw_only"] = string_match_all(r["raw_only_text"], doc.answers)
            r["layout"] = "".join("." if lod == 0 else str(lod) for lod, _ in entries)
            rows.append(r)
            print(mult, depth, k, "full", r["full"], "oracle", r["oracle"], "raw_only", r["raw_only"], "rescaled", r["rescaled"],
                  "gists", r["n_gists"], "norm g/t", round(r["gist_norm"] or 0, 2), round(r["tok_norm"], 2), r["layout"], flush=True)
print("seconds", round(time.time() - t0))
for mult in mults:
    sel = [r for r in rows if r["mult"] == mult]
    print(mult, {v: sum(r[v] for r in sel) for v in ("full", "oracle", "raw_only", "rescaled")}, "of", len(sel))
json.dump(rows, open(sys.argv[5], "w"), indent=1)
