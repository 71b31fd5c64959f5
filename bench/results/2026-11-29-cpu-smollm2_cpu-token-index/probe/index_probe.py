"""Probe (kept beside its record, not part of the package): does a run's token index put the task suite's queried
needle first, and does training the index alone on other sentence documents change that?

    python index_probe.py RUN_DIR ARM STEPS [FRESH_WINDOW]

Reads the index of RUN_DIR's LensNet (or, with FRESH_WINDOW > 0, a new twin index of that window), prints its rank
before and after STEPS steps of the index loss alone (no base forward: only token embeddings, batch 8) on
sentence-record documents of arm ``orig`` (the preset's 24 names and 6 phrasings), ``words`` (keys also drawn from
the tokenizer's single-token lowercase words, none a suite key word) or ``words_q`` (``words`` plus 3 question forms
whose last window is not the record's). Ranks:
- sentence: the queried record's best token match above the other record's, 96 held-out documents (query pooled
  from the windows before the answer, as training reads it);
- suite passkey / multikey at 8x and 16x of W = 128 (12 documents each, depths 0.1/0.5/0.9, the run's held-out
  filler; query pooled from the prompt's last windows, as a session reads it): ``first`` = the queried needle's
  best match above every other needle's and every filler token's; ``over_needles`` (multikey) = above the other
  needles' only (a tie is not a win).
"""
import copy
import sys
import zlib

import torch

import mc.data.sentence_recall as SR
from mc.build import load_run
from mc.data.loader import corpus_haystack, make_source
from mc.data.real_tasks import KEY_WORDS, filler_window, make_task_doc
from mc.nets.losses import index_locate_loss
from mc.nets.token_index import TokenIndex

run, arm, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
fresh_window = int(sys.argv[4]) if len(sys.argv) > 4 else 0
torch.manual_seed(0)
ctrl, tok = load_run(run)
cfg = ctrl.cfg
idx = ctrl.lensnet.index
if fresh_window:
    idx = TokenIndex(idx.norm.weight.shape[0], idx.dim, fresh_window, query="twin")
R = cfg.mc.recent_tokens
rcfg = copy.deepcopy(cfg.data.recall)
hay = corpus_haystack(cfg.data, "train", tok)
val_src = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)

words = [w[1:] for w in (tok.decode([i]) for i in range(49152))
         if w.startswith(" ") and w[1:].isalpha() and w[1:].islower() and 4 <= len(w) - 1 <= 9 and w[1:] not in KEY_WORDS]
ORIG = (SR.NAMES, SR.PHRASINGS)
EXTRA_PHRASINGS = (
    ("The locker number of {k} is {v}.", "Tell me the locker number of {k}, please. The number you asked for is"),
    ("Remember this: the access code for {k} is {v}.", "Which access code belongs to {k}? Here is that code:"),
    ("The ticket that {k} bought has the number {v}.", "Look up the ticket bought by {k} in the text. Its number is"),
)


def set_arm(a: str) -> None:
    SR.NAMES, SR.PHRASINGS = ORIG
    if a in ("words", "words_q"):
        SR.NAMES = tuple(ORIG[0]) + tuple(words)
    if a == "words_q":
        SR.PHRASINGS = ORIG[1] + EXTRA_PHRASINGS


def batch(seed0: int, n: int):
    docs = [SR.make_sentence_doc(rcfg, seed0 + j, tok, hay) for j in range(n)]
    return (docs, torch.stack([d.ids for d in docs]), torch.tensor([d.record_spans[d.answer_record] for d in docs]),
            torch.tensor([d.answer_span[0] for d in docs]))


def match_of(ids, query_end):  # [B, T]: as mc.nets.token_index.training_match, every token's match
    feats = idx.features(ctrl.base.tok_emb(ids))
    at = (query_end.view(-1, 1) - R + torch.arange(R)).clamp(min=0)
    q = idx.pooled_query(feats.gather(1, at.unsqueeze(-1).expand(-1, -1, feats.shape[-1])))
    return idx.match(idx.keys(feats), q)


@torch.no_grad()
def sentence_rank(n: int = 96) -> str:
    set_arm("orig")
    docs, ids, _, qend = batch(900_000_000, n)
    wins = 0
    for d, row in zip(docs, match_of(ids, qend)):
        best = [float(row[a:b].max()) for a, b in d.record_spans]
        wins += best[d.answer_record] > max(b for i, b in enumerate(best) if i != d.answer_record)
    return f"{wins}/{n}"


@torch.no_grad()
def suite_rank(n: int = 12) -> dict:
    out = {}
    for task in ("passkey", "multikey"):
        for mult in (8, 16):
            length, first, over = mult * 128, 0, 0
            for k in range(n):
                doc = make_task_doc(task, length, (0.1, 0.5, 0.9)[k % 3], 7_000_000 + 909090 * 10_000 + k, tok,
                                    filler_window(val_src, length, zlib.crc32(repr((task, length, k)).encode())))
                m = match_of(doc.ids[None], torch.tensor([doc.ids.numel()]))[0][:doc.question_start]
                best = [float(m[a:b].max()) for a, b in doc.needle_spans]
                filler = torch.ones_like(m, dtype=torch.bool)
                for a, b in doc.needle_spans:
                    filler[a:b] = False
                first += best[0] > max(best[1:] + [float(m[filler].max())])
                over += task == "multikey" and best[0] > max(best[1:])
            out[f"{task} {mult}x"] = f"first {first}/{n}" + (f", over_needles {over}/{n}" if task == "multikey" else "")
    return out


print(f"pool: {len(words)} words; arm {arm}, steps {steps}, fresh_window {fresh_window}")
print("before: sentence", sentence_rank(), suite_rank(), flush=True)
if steps:
    set_arm(arm)
    params = list(idx.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    for s in range(steps):
        _, ids, span, qend = batch(100_000 + s * 8, 8)
        loss = index_locate_loss(idx.loss_logits(match_of(ids, qend)), span, R)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s % 100 == 0 or s == steps - 1:
            print(f"step {s} index loss {float(loss.detach()):.3f}", flush=True)
    print("after: sentence", sentence_rank(), suite_rank(), flush=True)
