"""Config schema, Hydra composition, validation errors and the workflow flag parser."""
import pytest

from mc.config import ConfigError, RunConfig, from_dict, to_dict
from mc.config_checks import validate
from mc.config_loading import compile_hash, config_hash, load_config, parse_workflow_args


def test_defaults_validate():
    cfg = validate(RunConfig())
    assert cfg.mc.block_size == 32


def test_hydra_default_and_override():
    cfg = load_config(["allocator.inference.iterations=3"])
    assert isinstance(cfg, RunConfig)
    assert cfg.allocator.inference.iterations == 3
    assert cfg.compile.lensnet.train == "off"


@pytest.mark.parametrize("preset", ["smoke", "cpu", "long", "long_corpus", "h100"])
def test_presets_resolve(preset):
    cfg = load_config([f"preset={preset}"])
    assert cfg.preset == preset


def test_long_corpus_is_long_with_harder_documents():
    """long_corpus changes what its documents look like (stage-2 records anywhere included), how a branched
    refocus picks its layout (the lookahead fit, no margin, other zoom paths only up to 1536 tokens, a token anchor
    past them with the zoom cut at its record as a candidate, a guard on the raw record the question repeats), when a
    session undoes a refocus (the refocus check at 15, long's off) and when a refocus keeps the layout (a 1-nat margin
    for the unchanged layout, on schedule and at a prompt), how far a zoom
    grows its first opened block and how many edits a path makes (12, long's 10), when
    an inference session adds a level (focus_room) and the sweep's read budget and lengths, and adds LensNet's token
    index with its twin query and loss, gates stage 1 at a query loss of 0.01 (long's 0.1) and trains stage 2 for 2400
    steps instead of 3600 (obsidian Presets): the rest
    of the nets, the geometry, training and the rest of the allocator and the sweep are the long preset's."""
    long, hard = to_dict(load_config(["preset=long"])), to_dict(load_config(["preset=long_corpus"]))
    changed = {"haystack": "corpus", "eval_template": "{k} is {v}", "key_lens": [2, 3], "near_decoys": True,
               "stage1_min_tokens": 48, "stage2_records_region": 0.97,
               "templates": ["{k}={v}", "{k}: {v}", "{k} -> {v}", "set {k} to {v}", *["{k}{s}{v}"] * 4]}
    assert {k: hard["data"]["recall"][k] for k in changed} == changed
    picked = {"branch_lookahead": 3, "branch_margin": 0.0, "edge_sides": 3, "edit_budget": 12, "branch_max_tokens": 1536,
              "token_anchor": True, "anchor_path": True, "suffix_guard": 3, "refocus_check": 15,
              "scheduled_margin": 1.0, "prompt_margin": 1.0}
    assert {k: hard["allocator"]["inference"][k] for k in picked} == picked
    assert {k: long["allocator"]["inference"][k] for k in ("refocus_check", "scheduled_margin", "prompt_margin")} == \
        {"refocus_check": 0, "scheduled_margin": 0, "prompt_margin": 0}
    read = {"budget": 112, "multiples": [4, 16, 32, 64, 128, 256]}
    assert {k: hard["eval"]["long_range"][k] for k in read} == read and hard["mc"]["focus_room"] == 32
    assert hard["lensnet"]["token_index"] == 32 and long["lensnet"]["token_index"] == 0
    assert (hard["lensnet"]["index_query"], hard["mc"]["index_loss_weight"]) == ("twin", 1.0)
    assert (long["lensnet"]["index_query"], long["mc"]["index_loss_weight"]) == ("pooled", 0.0)
    assert (long["train"]["stage2"]["steps"], hard["train"]["stage2"]["steps"]) == (3600, 2400)
    assert (long["train"]["stage1"]["query_loss_target"], hard["train"]["stage1"]["query_loss_target"]) == (0.1, 0.01)
    for d in (long, hard):
        for k in changed:
            d["data"]["recall"].pop(k)
        for k in picked:
            d["allocator"]["inference"].pop(k)
        for k in read:
            d["eval"]["long_range"].pop(k)
        d["mc"].pop("focus_room"), d["mc"].pop("index_loss_weight")
        d["lensnet"].pop("token_index"), d["lensnet"].pop("index_query")
        d["train"]["stage2"].pop("steps"), d["train"]["stage1"].pop("query_loss_target")
        d.pop("preset"), d.pop("name", None)
    assert long == hard


@pytest.mark.parametrize("preset", ["smollm2", "smollm2_cpu", "h100_smollm2"])
def test_real_model_presets_resolve(preset):
    """The SmolLM2 presets compose and pass the start-up checks (which fetch and convert the model once)."""
    for mod in ("transformers", "gguf", "accelerate"):
        pytest.importorskip(mod, reason="model=smollm2 needs the hf and gguf extras (scripts/setup_env.sh installs them)")
    cfg = load_config([f"preset={preset}"])
    assert cfg.preset == preset and cfg.model.source == "hf" and cfg.model.hf_path.startswith("pypi:")
    assert cfg.mc.history_tokens <= cfg.model.max_seq_len  # what distillation needs: the teacher within its window
    if preset in ("smollm2_cpu", "h100_smollm2"):
        assert cfg.mc.positions == "slots"  # entry i at position i; bounded missed needles (obsidian Positions)
    if preset == "smollm2_cpu":
        assert cfg.allocator.expand_top == 1  # the gist LensNet ranks first is a candidate (obsidian Focus Allocator)
    if preset == "h100_smollm2":
        assert cfg.mc.max_entries == 2048 and cfg.mc.block_size == 32 and cfg.train.device == "cuda"
        assert cfg.model.hf_dtype == "bfloat16"  # flash attention; float32 made the step 3.3x slower (obsidian Training)
        assert max(cfg.eval.tasks.multiples) * cfg.mc.max_entries >= 64 * 1024  # the suite to 64k tokens


@pytest.mark.parametrize(
    "override, needle",
    [
        ("model.d_model=abc", "model.d_model"),
        ("compile.freeze=maybe", "compile.freeze"),
        ("compile.lensnet.train=fast", "compile.lensnet.train"),
        ("mc.block_size=1", "mc.block_size"),
        ("mc.recent_tokens=100000", "mc.recent_tokens"),
        ("mc.bucket_ladder=[8,4]", "mc.bucket_ladder"),
        ("mc.guided_variants=-1", "mc.guided_variants"),
        ("mc.decoy_variants=-1", "mc.decoy_variants"),
        ("mc.decoy_variants=6", "mc.decoy_variants"),  # the cpu preset: 2 guided + 6 > 7 random variants
        ("mc.lens_trains_gist=sometimes", "mc.lens_trains_gist"),
        ("gistnet.content_loss_weight=-1", "gistnet.content_loss_weight"),
        ("allocator.expand_top=-1", "allocator.expand_top"),
        ("eval.long_range.depth_jitter=0.7", "eval.long_range.depth_jitter"),
        ("eval.long_range.dense_multiples=[3]", "eval.long_range.dense_multiples"),
        ("eval.long_range.dense_n_per_cell=0", "eval.long_range.dense_n_per_cell"),
        ("data.recall.stage1_min_tokens=-3", "data.recall.stage1_min_tokens"),
        ("allocator.expand_threshold=1.5", "allocator.expand_threshold"),
        ("compile.warmup_iters=2", "compile.warmup_iters"),
        ("data.source=web", "data.source"),
        ("nope=1", "nope"),
        ("mc.focus_room=-1", "mc.focus_room"),
        ("mc.focus_room=57", "max_entries - recent_tokens = 56"),  # the cpu preset: 72 entries, a 16-token tail
        ("mc.focus_room=true", "mc.focus_room"),
        ("mc.history_mix=[100]", "mc.history_mix"),  # the cpu preset: not a multiple of block_size**max_lod (8)
        ("mc.history_mix=[64,256]", "<= mc.history_tokens (128)"),
        ("mc.history_mix=[64] compile.gistnet.train=default", "needs eager training"),
        ("preset=zzz", "no preset 'zzz'"),
    ],
)
def test_bad_values_name_the_key(override, needle):
    with pytest.raises(ConfigError) as info:
        load_config(override.split())
    assert needle in str(info.value)


def test_docs_per_cell_at_a_multiple():
    """`eval.long_range.dense_n_per_cell` documents per cell at the `dense_multiples`, `n_per_cell` elsewhere."""
    from mc.eval.long_range import docs_per_cell
    cfg = load_config(["preset=long", "eval.long_range.dense_multiples=[16]", "eval.long_range.dense_n_per_cell=20"])
    w = cfg.model.max_seq_len
    assert docs_per_cell(cfg, 16 * w) == 20 and docs_per_cell(cfg, 4 * w) == cfg.eval.long_range.n_per_cell


def test_dict_round_trip_and_hashes():
    cfg = RunConfig()
    again = from_dict(RunConfig, to_dict(cfg))
    assert again == cfg
    assert config_hash(cfg) == config_hash(again)
    other = RunConfig()
    other.name = "elsewhere"
    assert compile_hash(other) == compile_hash(cfg)  # the run's name does not change the compiled boundary
    other.mc.max_entries = 128
    other.mc.bucket_ladder = [64, 128]
    assert compile_hash(other) != compile_hash(cfg)
    with pytest.raises(ConfigError, match="unknown config key"):
        from_dict(RunConfig, {"modle": {}})


def test_workflow_flags():
    args = parse_workflow_args(["--preset", "smoke", "--mc_compile_lensnet=1", "--mc_compile_lensnet_inference", "1",
                                "allocator.inference.iterations=3"])
    assert args.preset == "smoke" and args.any_compile
    over = args.hydra_overrides()
    assert over[0] == "preset=smoke"
    assert "compile.lensnet.train=reduce-overhead" in over
    assert "compile.lensnet.inference=reduce-overhead" in over
    assert over[-1] == "allocator.inference.iterations=3"  # the user's overrides come last and win
    cfg = load_config(over)
    assert cfg.compile.lensnet.inference == "reduce-overhead" and cfg.compile.gistnet.train == "off"
    assert not parse_workflow_args(["--mc_compile_gistnet=0"]).any_compile


@pytest.mark.parametrize("argv, needle", [
    (["--mc_compile_lensnet=maybe"], "expected 1 or 0"),
    (["--mc_compile_lensnet"], "needs a value"),
    (["--frobnicate=1"], "unknown flag"),
    (["--compile_mode=turbo"], "--compile_mode"),
    (["stray"], "unexpected argument"),
])
def test_bad_flags(argv, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_workflow_args(argv)


def test_compile_on_predicates():
    comp = RunConfig().compile
    assert not comp.any_on and not comp.is_on("train") and not comp.is_on("inference")
    comp.gistnet.inference = "default"
    assert comp.any_on and comp.is_on("inference") and not comp.is_on("train")
    assert comp.gistnet.is_on("inference") and not comp.lensnet.is_on("inference")
    comp.lensnet.train = "reduce-overhead"
    assert comp.is_on("train") and comp.lensnet.is_on("train") and not comp.gistnet.is_on("train")
    with pytest.raises(ValueError, match="expected 'train' or 'inference'"):
        comp.lensnet.is_on("eval")


def test_removed_mega_cache_key_is_an_unknown_key():
    with pytest.raises(ConfigError, match="unknown config key CompileConfig.mega_cache"):
        from_dict(RunConfig, {"compile": {"mega_cache": "x.bin"}})
