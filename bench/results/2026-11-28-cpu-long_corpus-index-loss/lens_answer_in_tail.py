"""A record of a check (not a tool): PYTHONPATH=<repo> python lens_answer_in_tail.py RUN_DIR
Does LensNet lean on the answer in its training tail (a refocus never sees it)? On 32 stage-2 rows (seeds 200-203)
of the run's own sampler, the planned layouts are scored twice: with the full mask, and with LensNet's mask cut
where the answer starts. Prints in how many layouts the queried record's best gist beats every decoy's under each,
and how far the kept entries' scores move (median and max of the per-layout maximum)."""
import sys, torch
from mc.build import load_run
from mc.train.common import make_sampler
from mc.nets.token_index import training_match
from mc.tree import gist_levels
from mc.gather import gather_planned
ctrl, tok = load_run(sys.argv[1])
cfg = ctrl.cfg; mc = cfg.mc; K = mc.block_size
sm = make_sampler(cfg, "train", mc.history_tokens)
hits = {"full": 0, "cut": 0}; n = 0; drift = []
for it in range(4):
    g = torch.Generator().manual_seed(200 + it)
    b = sm.sample(8, mc.history_tokens, g)
    p = ctrl.prepare_step(b.tokens, g, b.queried_spans(), decoy_spans=b.other_record_spans(), query_ends=b.query_ends())
    with torch.no_grad():
        emb_btd = ctrl.base.embed(p.ids)
        levels = gist_levels(emb_btd, K, mc.max_lod, lambda x: ctrl._run_gistnet(x, "train"))
        embeds, mask = gather_planned(levels, p.index, p.lengths)
        R = embeds.shape[0]; V = p.variants
        num = torch.full((R,), float(p.ids.shape[1]))
        match, _ = (None, None) if ctrl.lensnet.index is None else training_match(ctrl.lensnet.index, emb_btd, p.index, p.query_end, mc)
        width = K ** p.lods.float()
        start = p.positions - (width - 1) / 2; end = p.positions + (width - 1) / 2
        qe = p.query_end.repeat_interleave(V)  # [R]
        cut = mask & (start < qe.view(-1, 1))
        out = {}
        for name, m in (("full", mask), ("cut", cut)):
            out[name] = ctrl.lensnet(embeds, m, p.positions, p.lods, num, match) if match is not None else ctrl.lensnet(embeds, m, p.positions, p.lods, num)
    others = b.other_record_spans()
    for r in range(R):
        s = r // V
        if not b.is_recall[s] or not others[s]: continue
        rs, re_ = int(b.record_start[s]), int(b.record_end[s])
        def best(a, c, sc):
            ov = mask[r] & (start[r] < c) & (end[r] >= a) & (p.lods[r] > 0)  # spans are [a, c), entries [start, end]
            return float(sc[r][ov].max()) if ov.any() else None
        n_ok = True; res = {}
        for name in out:
            q = best(rs, re_, out[name]); ds = [best(a, c, out[name]) for a, c in others[s]]
            ds = [d for d in ds if d is not None]
            if q is None or not ds: n_ok = False; break
            res[name] = q > max(ds)
        if not n_ok: continue
        n += 1
        for name in res: hits[name] += res[name]
        drift.append(float((out["full"][r] - out["cut"][r])[cut[r]].abs().max()))
print(f"rows {n}: record beats decoys full {hits['full']}, cut {hits['cut']}; max |score drift| on kept entries "
      f"median {sorted(drift)[len(drift)//2]:.3f} max {max(drift):.3f}")
