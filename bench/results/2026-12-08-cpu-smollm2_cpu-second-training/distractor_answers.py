"""Of each variant's multi-key misses in a suite JSON: how many answered another needle's number, by the queried
needle's LOD when the answer began. Rebuilds each document from the draw (tokenizer and corpus only, no nets).

    PYTHONPATH=<repo> python distractor_answers.py multikey.json DRAW
"""
import collections
import json
import re
import sys

from mc.config_loading import load_config
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.task_suite import suite_doc

path, draw = sys.argv[1], int(sys.argv[2])
cfg = load_config(["preset=smollm2_cpu", f"eval.draw_seed={draw}"])
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
counts = collections.Counter()
for r in json.load(open(path))["rows"]:
    doc = suite_doc(cfg, source, tok, r["task"], r["length"], r["depth"], r["doc"])
    assert list(doc.answers) == r["answers"], "not the suite's document"
    numbers = set(re.findall(r"is: (\d+)", tok.decode(doc.ids.tolist()))) - set(r["answers"])
    for v in ("focused", "salience"):
        if r["score"][v] == 0:
            words = r["text"][v].strip().split()
            said = words[0].rstrip(".") if words else ""
            counts[(v, r["needle_lod"][v], "another needle's number" if said in numbers else "other")] += 1
for key, n in sorted(counts.items()):
    print(*key, n, sep=" | ")
