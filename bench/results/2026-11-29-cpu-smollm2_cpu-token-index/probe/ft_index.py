"""Probe: fine-tune a trained run's token index alone (index loss only, no base) on sentence documents drawn with
other key pools / question forms, then read its rank on the task suite's documents. Not kept in the repo."""
import sys, zlib, random, copy, torch
import mc.data.sentence_recall as SR
from mc.build import load_run
from mc.data.real_tasks import make_task_doc, filler_window, KEY_WORDS
from mc.data.loader import make_source, corpus_haystack
from mc.nets.losses import index_locate_loss

run, arm, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]); fresh_window = int(sys.argv[4]) if len(sys.argv) > 4 else 0
torch.manual_seed(0)
ctrl, tok = load_run(run)
cfg = ctrl.cfg
idx = ctrl.lensnet.index
if fresh_window:
    from mc.nets.token_index import TokenIndex
    idx = TokenIndex(idx.norm.weight.shape[0], 32, fresh_window, query="twin")
R = cfg.mc.recent_tokens
rcfg = copy.deepcopy(cfg.data.recall)
hay = corpus_haystack(cfg.data, "train", tok)
val_src = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)

# a broad key pool: the tokenizer's own single-token words (leading space, lowercase letters, 4-9 long), none a suite key
words = []
for i in range(tok.vocab_size if hasattr(tok, "vocab_size") else 49152):
    s = tok.decode([i])
    if s.startswith(" ") and s[1:].isalpha() and s[1:].islower() and 4 <= len(s) - 1 <= 9 and s[1:] not in KEY_WORDS:
        words.append(s[1:])
print("pool words", len(words), words[:10])
ORIG_NAMES, ORIG_PHR = SR.NAMES, SR.PHRASINGS
EXTRA_PHR = (
    ("The locker number of {k} is {v}.", "Tell me the locker number of {k}, please. The number you asked for is"),
    ("Remember this: the access code for {k} is {v}.", "Which access code belongs to {k}? Here is that code:"),
    ("The ticket that {k} bought has the number {v}.", "Look up the ticket bought by {k} in the text. Its number is"),
)

def set_arm(a):
    SR.NAMES, SR.PHRASINGS = ORIG_NAMES, ORIG_PHR
    if a in ("words", "words_q"):
        SR.NAMES = tuple(ORIG_NAMES) + tuple(words)
    if a == "words_q":
        SR.PHRASINGS = ORIG_PHR + EXTRA_PHR

def batch(seed0, bsz):
    docs = [SR.make_sentence_doc(rcfg, seed0 + j, tok, hay) for j in range(bsz)]
    ids = torch.stack([d.ids for d in docs])
    span = torch.tensor([d.record_spans[d.answer_record] for d in docs])
    qend = torch.tensor([d.answer_span[0] for d in docs])
    return docs, ids, span, qend

def match_of(ids, qend):
    emb = ctrl.base.tok_emb(ids)
    feats = idx.features(emb)
    at = (qend.view(-1, 1) - R + torch.arange(R)).clamp(min=0)
    q = idx.pooled_query(feats.gather(1, at.unsqueeze(-1).expand(-1, -1, feats.shape[-1])))
    return idx.match(idx.keys(feats), q)

def sentence_rank(n=96):
    set_arm("orig")
    with torch.no_grad():
        docs, ids, span, qend = batch(900_000_000, n)
        m = match_of(ids, qend)
    first = 0
    for d, row in zip(docs, m):
        best = [float(row[a:b].max()) for a, b in d.record_spans]
        first += best[d.answer_record] > max(b for i, b in enumerate(best) if i != d.answer_record)
    return first / n

def suite_rank(n=12):
    out = {}
    for task in ("passkey", "multikey"):
        for mult in (8, 16):
            length, f = mult * 128, 0
            for k in range(n):
                seed = 7_000_000 + 909090 * 10_000 + k
                doc = make_task_doc(task, length, [0.1, 0.5, 0.9][k % 3], seed, tok,
                                    filler_window(val_src, length, zlib.crc32(repr((task, length, k)).encode())))
                with torch.no_grad():
                    m = match_of(doc.ids[None], torch.tensor([doc.ids.numel()]))[0][:doc.question_start]
                best = [float(m[a:b].max()) for a, b in doc.needle_spans]
                mask = torch.ones_like(m, dtype=torch.bool)
                for a, b in doc.needle_spans: mask[a:b] = False
                f += best[0] > max(best[1:] + [float(m[mask].max())])
            out[f"{task}{mult}"] = f"{f}/{n}"
    return out

print("before", "sentence rank", sentence_rank(), suite_rank(), flush=True)
if steps:
    set_arm(arm)
    for p in ctrl.parameters() if hasattr(ctrl, "parameters") else []: pass
    params = list(idx.parameters())
    for p in params: p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    for s in range(steps):
        docs, ids, span, qend = batch(100_000 + s * 8, 8)
        m = match_of(ids, qend)
        loss = index_locate_loss(idx.loss_logits(m), span, R)
        opt.zero_grad(); loss.backward(); opt.step()
        if s % 100 == 0: print(s, float(loss.detach()), flush=True)
    print("after", arm, steps, "sentence rank", sentence_rank(), suite_rank(), flush=True)
