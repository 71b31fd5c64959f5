"""The generation CLI (scripts/mc_generate.py, mc.app.generate) and mc.build.load_run on a tiny run folder.

The run folder is made the way the workflow makes one (config.json, then stage 1 and stage 2 through
train_stage1 / train_stage2, two steps each on the generated recall task), at the tiny test geometry,
so the whole file takes seconds instead of a smoke run's minutes.
"""
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_config import TINY  # noqa: E402

from mc.app.generate import GenerateError, lod_map_text, main, prompt_ids  # noqa: E402
from mc.build import load_run  # noqa: E402
from mc.config import ConfigError, to_dict  # noqa: E402
from mc.config_loading import load_config  # noqa: E402
from mc.data.tokenizer import ByteTokenizer  # noqa: E402
from mc.io import write_json  # noqa: E402
from mc.train.stage1 import train_stage1  # noqa: E402
from mc.train.stage2 import train_stage2  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STEPS = [f"train.{s}.{k}={v}" for s in ("stage1", "stage2") for k, v in
         (("steps", 2), ("warmup_steps", 1), ("eval_every", 2), ("eval_batches", 1), ("ckpt_every", 2))]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    cfg = load_config(TINY + STEPS + ["data=recall", "data.recall.doc_tokens=64", "data.recall.n_records=2",
                                      "telemetry.jsonl=false", "name=tiny_gen"])
    d = tmp_path_factory.mktemp("runs") / "tiny_gen"
    d.mkdir()
    write_json(d / "config.json", to_dict(cfg))  # what the workflow records before any stage
    train_stage1(cfg, d, progress=False)
    train_stage2(cfg, d, progress=False)
    return d


def _main(argv, stdin_text=None):
    out, err = io.StringIO(), io.StringIO()
    rc = main(argv, stdin=io.StringIO(stdin_text or ""), stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def test_cli_runs_on_a_run_folder(run_dir, tmp_path):
    """The issue's command, as a user runs it: a subprocess on the script."""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mc_generate.py"), "--run-dir", str(run_dir),
                           "--prompt", "def ", "--max-new-tokens", "40", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                                                            "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert len(rec["tokens"]) == 40 and all(0 <= t < 259 for t in rec["tokens"])
    assert rec["text"] == ByteTokenizer().decode(rec["tokens"])
    assert proc.stdout == rec["text"] + "\n"  # streamed token by token, the same text
    assert rec["prompt_tokens"] == 5 and rec["prompt_tokens_per_s"] > 0 and rec["decode_tokens_per_s"] > 0
    # TINY refocuses every 4 tokens: the 5-token prompt is due at once (refocused before the first token is drawn),
    # then every 4 new tokens: 1 + 40 / 4
    assert len(rec["refocus_ms"]) == len(rec["refocus_log"]) == 11 and rec["refocus_log"][0]["num_tokens"] == 5
    assert {"first_changed_entry", "recomputed_entries", "edits"} <= set(rec["refocus_log"][0])
    assert rec["refocus_checks"] == rec["check_ms"] == []  # allocator.inference.refocus_check is off by default


def test_compiled_inference_overrides_warm_up_apart_and_keep_the_tokens(run_dir, tmp_path):
    """compile.decode=default compile.gistnet.inference=default as overrides: the cached forward and GistNet
    compiled (a subprocess: Dynamo state is process-global), their graphs built before the clocks start
    (warmup_s), the same greedy tokens as the eager cached path."""
    out = tmp_path / "compiled.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mc_generate.py"), "--run-dir", str(run_dir),
                           "--prompt", "x = 1\ny = ", "--max-new-tokens", "30", "--json", str(out),
                           "compile.decode=default", "compile.gistnet.inference=default"],
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                               "TORCHINDUCTOR_CACHE_DIR": str(ROOT / ".cache" / "inductor")})
    assert proc.returncode == 0, proc.stderr
    compiled = json.loads(out.read_text())
    rc, _, err = _main(["--run-dir", str(run_dir), "--prompt", "x = 1\ny = ", "--max-new-tokens", "30",
                        "--json", str(tmp_path / "eager.json")])
    assert rc == 0, err
    eager = json.loads((tmp_path / "eager.json").read_text())
    assert compiled["tokens"] == eager["tokens"]
    assert compiled["compile"] == {"decode": "default", "gistnet": "default", "lensnet": "off"}
    assert compiled["warmup_s"] > 0 and eager["warmup_s"] == 0.0
    rc, _, err = _main(["--run-dir", str(run_dir), "--prompt", "x", "compile.nonsense=1"])
    assert rc == 2 and "unknown config key 'compile.nonsense'" in err and len(err.splitlines()) == 1, err


def test_cache_and_no_cache_agree_and_show_wc(run_dir, tmp_path):
    recs = {}
    for flag in ([], ["--no-kv-cache"]):
        rc, out, err = _main(["--run-dir", str(run_dir), "--max-new-tokens", "30", "--show-wc",
                              "--json", str(tmp_path / f"{len(flag)}.json"), *flag], stdin_text="x = 1\ny = ")
        assert rc == 0, err
        recs[bool(flag)] = json.loads((tmp_path / f"{len(flag)}.json").read_text())
        assert err.count("[wc] before refocus") == err.count("[wc] after refocus") == len(recs[bool(flag)]["refocus_ms"])
    assert recs[False]["tokens"] == recs[True]["tokens"]  # greedy: the cache changes speed, not tokens
    assert recs[False]["kv_cache"] and not recs[True]["kv_cache"]


def test_sampling_seed_reproduces(run_dir, tmp_path):
    args = ["--run-dir", str(run_dir), "--prompt", "ab", "--max-new-tokens", "12", "--temperature", "1.0",
            "--top-k", "20"]
    texts = [_main(args + ["--seed", str(s)])[1] for s in (5, 5, 6)]
    assert texts[0] == texts[1] and texts[0] != texts[2]


def test_load_run_public_function(run_dir):
    ctrl, tok = load_run(run_dir)
    assert not ctrl.gistnet.training and not ctrl.lensnet.training
    ctrl.begin_session(tok.encode_tensor("hello"))
    assert ctrl.generate(3).shape == (3,)
    assert not (run_dir / "telemetry.jsonl").exists()  # loading for inference writes nothing into the run


def test_load_run_applies_overrides_and_refuses_bad_ones(run_dir):
    ctrl, _ = load_run(run_dir, overrides=["allocator.inference.refocus_interval=7", "compile.decode=default"])
    assert ctrl.cfg.allocator.inference.refocus_interval == 7 and ctrl.cfg.compile.decode == "default"
    assert load_run(run_dir)[0].cfg.allocator.inference.refocus_interval == 4  # the recorded config is untouched
    with pytest.raises(ConfigError, match="unknown config key 'mc.nope'"):
        load_run(run_dir, overrides=["mc.nope=1"])
    with pytest.raises(ConfigError, match="refocus_interval"):
        load_run(run_dir, overrides=["allocator.inference.refocus_interval=0"])


@pytest.mark.parametrize("case", ["missing", "not_a_run", "no_stage2", "empty_prompt", "empty_stdin", "bad_file"])
def test_bad_input_is_one_line(run_dir, tmp_path, case):
    d, extra = run_dir, ["--prompt", "def "]
    if case == "missing":
        d = tmp_path / "nope"
    elif case == "not_a_run":
        d = tmp_path
    elif case == "no_stage2":
        d = tmp_path / "half"
        (d / "stage1").mkdir(parents=True)
        (d / "config.json").write_text((run_dir / "config.json").read_text())
        (d / "stage1" / "base.pt").write_bytes((run_dir / "stage1" / "base.pt").read_bytes())
    elif case == "empty_prompt":
        extra = ["--prompt", ""]
    elif case == "empty_stdin":
        extra = []
    elif case == "bad_file":
        (tmp_path / "p.txt").write_bytes(b"ok \xff\xfe")
        extra = ["--prompt-file", str(tmp_path / "p.txt")]
    rc, out, err = _main(["--run-dir", str(d), "--max-new-tokens", "4", *extra])
    assert rc == 2 and out == ""
    assert err.startswith("mc_generate: error: ") and err.count("\n") == 1, err
    want = {"missing": "does not exist", "not_a_run": "no config.json", "no_stage2": "stage2/ckpt.pt",
            "empty_prompt": "empty", "empty_stdin": "empty", "bad_file": "not UTF-8"}[case]
    assert want in err


def test_prompt_ids_outside_the_vocabulary():
    tok = ByteTokenizer()
    assert prompt_ids("ab", tok, 259).tolist() == [256, 97, 98]
    with pytest.raises(GenerateError, match=r"BOS id 256 is outside the run's vocabulary of 128 ids"):
        prompt_ids("ab", tok, 128)

    class ZeroBos(ByteTokenizer):  # BOS inside a 128-id vocabulary, so the bytes are what fails
        def encode(self, text, bos=True, eos=False):
            return [0] + list(text.encode("utf-8"))
    with pytest.raises(GenerateError, match=r"token 2 \(id 195, from 'é'\) is outside the run's vocabulary of 128"):
        prompt_ids("aé", ZeroBos(), 128)  # an ASCII-only model cannot take é's first byte 0xc3


def test_lod_map_text():
    from mc.working_context import WorkingContext  # noqa: PLC0415

    wc = WorkingContext.build(40, fill=True, block_size=4, max_lod=2, max_entries=16, recent_tokens=8)
    text = lod_map_text(wc)
    chars, spans = text.split(" | ")
    assert len(chars) == len(wc) and chars == "".join(str(lod) for lod, _ in wc.entries)
    assert spans.startswith(f"L{wc.entries[0][0]} ") and spans.endswith(",40)")
    assert torch.tensor([int(c) for c in chars]).max() <= 2


def test_a_base_without_the_cached_forward_decodes_without_the_cache(run_dir, tmp_path, monkeypatch):
    """model=hf bases have no GPT.forward_cached: the API says so in one line, and the CLI decodes the
    reference way with a note instead of failing (simulated here by taking the method away)."""
    from mc.nets.gpt import GPT  # noqa: PLC0415

    monkeypatch.delattr(GPT, "forward_cached")
    ctrl, _ = load_run(run_dir)
    ctrl.begin_session(torch.tensor([100, 101, 102]))
    with pytest.raises(ValueError, match="KV cache needs a base with a cached forward.*use_cache=False"):
        ctrl.generate(3)
    assert ctrl.generate(3, use_cache=False).shape == (3,)
    rc, out, err = _main(["--run-dir", str(run_dir), "--prompt", "ab", "--max-new-tokens", "5",
                          "--json", str(tmp_path / "o.json")])
    assert rc == 0, err
    assert "note: the KV cache needs a base with a cached forward" in err
    assert not json.loads((tmp_path / "o.json").read_text())["kv_cache"]


def test_token_printer_streams_exactly_the_decoded_text():
    from mc.app.generate import TokenPrinter  # noqa: PLC0415

    tok = ByteTokenizer()
    text = "héllo ✓ wörld"
    ids = tok.encode(text, bos=False) + [tok.eos_id]
    out = io.StringIO()
    printer = TokenPrinter(out, tok)
    seen = []
    for t in ids:
        printer(t)
        seen.append(out.getvalue())
    printer.finish()
    assert out.getvalue() == tok.decode(ids) + "\n" == text + "\n"
    assert "\ufffd" not in "".join(seen)  # a character split over byte tokens waits until it is complete

    class Rewriting:  # a tokenizer whose text for earlier tokens changes when more follow
        def decode(self, ids):
            return "".join("A" if i == 0 else "b" for i in ids) if len(ids) < 3 else "X" * len(ids)

    out = io.StringIO()
    printer = TokenPrinter(out, Rewriting())
    for t in (0, 1, 1):
        printer(t)
    printer.finish()
    assert out.getvalue().startswith("Ab") and "final: 'XXX'" in out.getvalue()  # says so instead of hiding it
