"""The task suite (mc.data.real_tasks, mc.eval.task_suite): documents for any tokenizer, RULER's scoring, the
salience locator, the cached plain decode, every variant through the sweep, and scripts/mc_eval.py --tasks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _tiny_config import TINY
from mc.build import build_controller
from mc.config import DataConfig, ModelConfig, to_dict
from mc.config_loading import load_config
from mc.data.loader import make_source
from mc.data.real_tasks import REAL_TASKS, filler_window, make_task_doc, string_match_all
from mc.data.tokenizer import ByteTokenizer
from mc.eval.focus_policies import salience_scores
from mc.eval.oracle_layout import ORACLE_RESTS
from mc.eval.task_suite import plain_greedy, run_task_suite, to_markdown

ROOT = Path(__file__).resolve().parents[1]
SUITE = TINY + ["model.max_seq_len=1024", "mc.max_lod=3", "eval.tasks.multiples=[16]", "eval.tasks.depths=[0.2,0.8]",
                "eval.tasks.n_per_cell=1", "telemetry.jsonl=false"]


@pytest.fixture(scope="module")
def filler():
    return make_source(DataConfig(source="stdlib", val_fraction=0.5), "val", max_files=40, tokenizer=ByteTokenizer())


def test_string_match_all():
    assert string_match_all(" The answer is 12345.", ("12345",)) == 1.0
    assert string_match_all("AB and cd", ("ab", "CD", "ef", "gh")) == 0.5
    assert string_match_all("", ("1",)) == 0.0
    with pytest.raises(ValueError):
        string_match_all("x", ())


@pytest.mark.parametrize("task", REAL_TASKS)
def test_documents_hold_their_needles_and_question(task, filler):
    tok = ByteTokenizer()
    fill = filler_window(filler, 800, seed=5)
    doc = make_task_doc(task, 800, 0.3, 7, tok, fill)
    again = make_task_doc(task, 800, 0.3, 7, tok, fill)  # same args, same doc
    assert doc.ids.shape == (800,) and torch.equal(doc.ids, again.ids) and doc.answers == again.answers
    text = tok.decode(doc.ids)
    for a in doc.answers:
        assert a in tok.decode(doc.ids[: doc.question_start])  # every reference is written in the history
    needles = [tok.decode(doc.ids[a:b]) for a, b in doc.needle_spans]
    assert all(n.startswith("\n") and n.endswith(".\n") for n in needles)
    assert abs(doc.needle_spans[0][0] - 0.3 * (doc.question_start - sum(b - a for a, b in doc.needle_spans))) < 120
    assert text.rstrip().endswith(("is", "are", "they are:"))
    pieces = [tok.decode(doc.ids[a:b]) for a, b in doc.answer_spans]  # what the oracle opens first
    assert len(pieces) == len(needles)
    for (na, nb), (aa, ab), piece in zip(doc.needle_spans, doc.answer_spans, pieces):
        assert na <= aa < ab <= nb and piece.strip(" .:=\n").isalnum(), (piece, task)
    assert pieces[0].strip() in ((doc.answers[0],) if task != "multivalue" else doc.answers)
    if task == "vartrack":  # the chain follows its first statement, in order
        assert [p.strip() for p in pieces] == list(doc.answers)
        starts = [a for a, _ in doc.needle_spans]
        assert starts == sorted(starts) and f"VAR {doc.answers[1]} = VAR {doc.answers[0]}." in needles[1]
    if task == "multikey":  # the queried key's value only
        assert len(doc.answers) == 1 and len(doc.needle_spans) == 4
    with pytest.raises(ValueError, match="cannot hold"):
        make_task_doc(task, 60, 0.5, 1, tok, fill)


def test_plain_greedy_equals_the_uncached_argmax_loop():
    cfg = load_config(SUITE)
    ctrl = build_controller(cfg)
    ids = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(0))
    seq, want = ids.clone(), []
    with torch.no_grad():
        for _ in range(6):
            t = int(ctrl.base(seq[None])[0, -1].argmax())
            want.append(t)
            seq = torch.cat([seq, torch.tensor([t])])
    assert plain_greedy(ctrl.base, ids, 6) == want


def test_salience_ranks_the_entry_that_shares_the_question_s_rare_tokens():
    cfg = load_config(SUITE)
    ctrl = build_controller(cfg)
    tok = ByteTokenizer()
    body = tok.encode_body("z" * 300 + "QX" + "z" * 300)  # one rare pair of tokens, far back
    question = tok.encode_body("\nQX?")
    s = ctrl.begin_session(torch.tensor(body + question))
    n = len(body)
    sc = salience_scores(s, (n, n + len(question)))
    spans = [s.wc.span(i) for i in range(len(s.wc))]
    best = int(sc.argmax())
    assert spans[best][0] <= 300 < spans[best][1] and float(sc[best]) == 1.0
    assert all(float(v) == 0.0 for v, (a, _) in zip(sc, spans) if a >= n)  # the question's own entries


def test_sweep_runs_every_variant(filler):
    cfg = load_config(SUITE + ["eval.tasks.tasks=[passkey,vartrack]"])
    ctrl = build_controller(cfg)
    res = run_task_suite(ctrl, cfg, source=filler)
    assert len(res["rows"]) == 4 and res["lengths"] == [16 * 32]
    assert res["refocus"] == to_dict(cfg.allocator.inference)  # the search `focused` and `salience` used
    for row in res["rows"]:
        assert set(row["score"]) == {"full", "recency", "compressed", "focused", "random", "salience", "oracle"}
        assert row["entries"]["full"] == 512 and row["entries"]["recency"] == 32
        assert all(row["entries"][v] <= 32 for v in ("compressed", "focused", "salience", "oracle"))
        assert row["edits"]["random"] <= row["edits"]["focused"]
        assert row["needle_lod"]["oracle"] <= row["needle_lod"]["compressed"]  # the oracle opens the needles
        # the answer's own tokens: never coarser than the needle around them, opened first by the oracle
        assert row["answer_lod"]["oracle"] <= min(row["needle_lod"]["oracle"], row["answer_lod"]["compressed"])
        assert row["answer_lod"]["full"] is None and row["answer_lod"]["recency"] is None  # no session there
    cells = {(c["task"], c["depth"], c["variant"]): c for c in res["cells"]}
    assert cells[("passkey", 0.2, "full")]["compression"] == 1.0
    assert cells[("passkey", 0.2, "recency")]["compression"] == 16.0
    assert all(0 <= c["lo"] <= c["score"] <= c["hi"] <= 1 for c in res["cells"])
    md = to_markdown(res)
    assert "**passkey**" in md and "| oracle |" in md and "16x W, depth 0.8" in md
    assert f"Refocus search: iterations {cfg.allocator.inference.iterations}, " in md
    assert res["positions"] == cfg.mc.positions and f"tokens, {cfg.mc.positions} positions, " in md  # how it read
    n_at0 = sum(r["answer_lod"]["oracle"] == 0 for r in res["rows"] if r["task"] == "passkey")
    assert f"oracle {n_at0}/2 (" in md and "At LOD0 when the answer began" in md
    plans = [r["oracle_plan"] for r in res["rows"] if r["task"] == "passkey"]
    assert set(plans) <= set(ORACLE_RESTS) and len(plans) == 2
    assert f"Oracle plan kept (the better-read, ties the first): neighbours {plans.count('neighbours')}, " in md
    each = [r["oracle_plans"] for r in res["rows"] if r["task"] == "passkey"]
    assert all(set(e) == set(ORACLE_RESTS) for e in each)
    assert all(r["oracle_plans"][r["oracle_plan"]] == r["score"]["oracle"] == max(r["oracle_plans"].values())
               for r in res["rows"])  # the kept plan is the best-read one, and the oracle's score is its
    assert f"Each oracle plan alone, documents' scores summed: neighbours {sum(e['neighbours'] for e in each):g}, " in md
    too_long = load_config(SUITE + ["eval.tasks.tasks=[passkey]", "eval.tasks.multiples=[40]"])  # 1280 > 1024 window
    res = run_task_suite(ctrl, too_long, source=filler)
    assert all("full" not in r["score"] for r in res["rows"])  # no full-context reference past the window


def test_suite_reads_the_same_nets_at_another_budget(filler):
    """eval.tasks.budget: the run's nets read with W = 48 entries (the run's own W is 32); the run's controller is
    left as it was, and a budget the working context cannot hold is refused at start-up."""
    over = ["eval.tasks.tasks=[passkey]", "eval.tasks.depths=[0.5]", "eval.tasks.variants=[compressed,oracle]"]
    cfg = load_config(SUITE + over + ["eval.tasks.budget=48"])
    ctrl = build_controller(cfg)
    res = run_task_suite(ctrl, cfg, source=filler)
    assert res["budget"] == 48 and res["lengths"] == [16 * 48] and len(res["rows"]) == 1
    row = res["rows"][0]
    assert row["length"] == 16 * 48
    assert 32 < row["entries"]["compressed"] <= 48 and 32 < row["entries"]["oracle"] <= 48  # more than W = 32 holds
    assert ctrl.cfg.mc.max_entries == 32 and ctrl.session is None  # the run's controller never read a document
    assert "budget W = 48 entries" in to_markdown(res)
    same = run_task_suite(ctrl, load_config(SUITE + over + ["eval.tasks.budget=32"]), source=filler)
    assert same["budget"] == 32 and ctrl.session is not None  # at the run's own W the run's controller reads
    for bad, says in (("8", "larger than mc.recent_tokens"), ("-1", "integer >= 0")):
        with pytest.raises(ValueError, match=says):
            load_config(SUITE + over + [f"eval.tasks.budget={bad}"])


def test_mc_eval_tasks_on_a_run_folder(tmp_path):
    from mc.io import write_json
    from mc.train.stage1 import train_stage1
    from mc.train.stage2 import train_stage2

    steps = [f"train.{s}.{k}={v}" for s in ("stage1", "stage2") for k, v in
             (("steps", 1), ("warmup_steps", 1), ("eval_every", 1), ("eval_batches", 1), ("ckpt_every", 1))]
    cfg = load_config(SUITE + steps + ["data=recall", "data.recall.doc_tokens=64", "name=t"])
    run = tmp_path / "t"
    run.mkdir()
    write_json(run / "config.json", to_dict(cfg))
    train_stage1(cfg, run, progress=False)
    train_stage2(cfg, run, progress=False)
    cmd = [sys.executable, str(ROOT / "scripts" / "mc_eval.py"), "--run-dir", str(run), "--quiet"]
    done = subprocess.run(cmd + ["--tasks", "passkey", "eval.tasks.depths=[0.5]"], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    res = json.loads((run / "eval" / "tasks.json").read_text())
    assert res["tasks"] == ["passkey"] and len(res["rows"]) == 1 and (run / "eval" / "tasks.md").is_file()
    bad = subprocess.run(cmd + ["--tasks", "passkey,sudoku"], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "eval.tasks.tasks" in bad.stderr and "Traceback" not in bad.stderr


def test_the_oracle_keeps_the_plan_that_reads_best(monkeypatch):
    """The oracle reads each plan from the prompt's snapshot and keeps the one whose answer scores best, the first on
    a tie: an upper bound over the plans, whichever the reader reads through better."""
    import mc.eval.task_suite as suite

    class Session:
        wc = [0] * 5

        def restore(self, snap):
            self.restored = snap

    class Tok:
        def decode(self, ids):
            return " ".join(str(i) for i in ids)

    ctrl = type("Ctrl", (), {"session": Session()})()
    doc = type("Doc", (), {"answers": ["42"]})()
    tried = []
    monkeypatch.setattr(suite, "multi_span_oracle_refocus", lambda c, sp, core, question, rest: tried.append(rest) or 7)
    monkeypatch.setattr(suite, "needle_lod", lambda wc, span: 0)
    for reads, kept in (({"recent"}, "recent"), ({"neighbours"}, "neighbours"), (set(ORACLE_RESTS), "neighbours"),
                        (set(), "neighbours")):
        tried.clear()
        monkeypatch.setattr(suite, "session_greedy", lambda c, n, eos_id: [42] if tried[-1] in reads else [7])
        row = {}
        edits, (out, lod, answer_lod, entries) = suite._best_oracle(ctrl, doc, "snap", [(1, 2)], [(1, 2)], (3, 4),
                                                                    4, None, Tok(), row)
        assert tried == list(ORACLE_RESTS) and row["oracle_plan"] == kept
        assert row["oracle_plans"] == {p: float(p in reads) for p in ORACLE_RESTS}
        assert out == ([42] if reads else [7]) and edits == 7 and entries == 5
