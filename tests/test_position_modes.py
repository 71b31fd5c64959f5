"""Position modes (mc.positions): bounded and entries keep every base-model position inside the window."""
from __future__ import annotations

import pytest
import torch

import mc.controller as controller_module
from _tiny_config import TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.positions import IncrementalBasePositions, base_positions, base_positions_list, bounded_step
from mc.working_context import WorkingContext

WINDOW, RECENT = 64, 8


def wc_positions(n: int, *, K=4, max_lod=3, max_entries=32) -> tuple[torch.Tensor, torch.Tensor]:
    wc = WorkingContext.build(n, block_size=K, max_lod=max_lod, max_entries=max_entries, recent_tokens=RECENT)
    pos = torch.tensor(wc.positions())
    pad = 40 - len(pos)  # a padded row, as the buffers hold it
    return torch.cat([pos, torch.zeros(pad)])[None], torch.cat([torch.ones(len(pos), dtype=torch.bool),
                                                                torch.zeros(pad, dtype=torch.bool)])[None]


@pytest.mark.parametrize("mode", ["bounded", "entries"])
@pytest.mark.parametrize("n", [1, 9, 40, 63, 64])
def test_bounded_equals_global_inside_the_window(n, mode):
    pos, mask = wc_positions(n)
    out = base_positions(pos, mask, mode=mode, window=WINDOW, recent=RECENT)
    assert torch.equal(out, pos)
    assert torch.equal(base_positions(pos, mask, mode="global", window=WINDOW, recent=RECENT), pos)


@pytest.mark.parametrize("mode", ["bounded", "entries"])
@pytest.mark.parametrize("n", [65, 100, 1000, 6400, 10**6])
def test_bounded_stays_in_the_window_keeps_order_and_the_tail_exact(n, mode):
    pos, mask = wc_positions(n, max_lod=10)
    out = base_positions(pos, mask, mode=mode, window=WINDOW, recent=RECENT)
    real, mapped = pos[mask], out[mask]
    assert mapped.min() >= 0 and mapped.max() <= WINDOW - 1
    q = bounded_step(WINDOW, RECENT)
    assert WINDOW - q <= mapped.max() <= WINDOW - 1  # the newest token sits near the end of the window
    assert (mapped[1:] > mapped[:-1]).all(), "order of the entries is kept"
    tail = real >= n - RECENT
    assert tail.sum() == RECENT
    torch.testing.assert_close(mapped[tail] - mapped[tail][0], real[tail] - real[tail][0], rtol=0, atol=1e-3)
    assert (out[~mask] == 0).all()  # padding untouched


def test_bounded_positions_move_only_every_q_tokens_so_a_kv_cache_stays_valid():
    """Appending one token leaves every earlier entry's mapped position as it was, except when the
    exact region's start steps (once per q tokens); the list version equals the tensor version."""
    q, steps, prev = bounded_step(WINDOW, RECENT), 0, None
    for n in range(WINDOW + 1, WINDOW + 6 * q + 1):
        real = [float(p) for p in range(0, n - RECENT, 4)] + [float(p) for p in range(n - RECENT, n)]
        mapped = base_positions_list(real, mode="bounded", window=WINDOW, recent=RECENT)
        t = torch.tensor(real)[None]
        assert mapped == base_positions(t, torch.ones_like(t, dtype=torch.bool), mode="bounded", window=WINDOW,
                                        recent=RECENT)[0].tolist()
        assert max(mapped) <= WINDOW - 1
        if prev is not None:
            shared = [i for i, p in enumerate(real) if p in prev]
            steps += any(mapped[i] != prev[real[i]] for i in shared)
        prev = dict(zip(real, mapped))
    assert 5 <= steps <= 7  # one step per q tokens, not one per token


def test_unknown_mode_and_a_tail_as_long_as_the_window_are_refused():
    pos, mask = wc_positions(100)
    with pytest.raises(ValueError, match="unknown position mode"):
        base_positions(pos, mask, mode="ranks", window=WINDOW, recent=RECENT)
    with pytest.raises(ConfigError, match="mc.positions"):
        load_config(TINY + ["mc.positions=ranks"])
    with pytest.raises(ConfigError, match="max_seq_len"):
        load_config(TINY + ["mc.positions=bounded", "mc.recent_tokens=64", "mc.max_entries=80",
                            "mc.bucket_ladder=[16,80]", "eval.tail_tokens=8"])


@pytest.mark.parametrize("mode", ["bounded", "entries", "slots", "global"])
def test_no_position_past_the_window_reaches_the_base_in_a_long_session(monkeypatch, mode):
    """A session of 100x model.max_seq_len tokens (tiny config: 64 -> 6,400 and on), eager nets."""
    cfg = load_config(TINY + [f"mc.positions={mode}", "allocator.inference.refocus_interval=16"])
    ctrl = build_controller(cfg)
    seen = []
    real_rotary = controller_module.lod_rotary_cos_sin

    def spy(positions, lods, *args, **kwargs):
        seen.append(float(positions.max()))
        return real_rotary(positions, lods, *args, **kwargs)
    monkeypatch.setattr(controller_module, "lod_rotary_cos_sin", spy)
    window = cfg.model.max_seq_len
    g = torch.Generator().manual_seed(0)
    ctrl.begin_session(torch.randint(0, 250, (100 * window,), generator=g))
    ctrl.next_token_logits()
    for _ in range(40):  # then stream, refocus on schedule, and read logits
        ctrl.append(torch.randint(0, 250, (1,), generator=g))
        ctrl.next_token_logits()
    assert len(seen) == 41
    if mode != "global":
        assert max(seen) <= window - 1
    else:  # the control: the global mode does feed positions the base never saw
        assert max(seen) > 100 * window - 2


def test_entries_mode_keeps_an_expanded_lod0_run_one_apart_where_bounded_squeezes_it():
    """Past the window, bounded scales the older region by (W - R - Q + 1) / c: at 8x the window an
    expanded LOD0 run's tokens sit ~0.1 apart. entries puts older entries 1 apart in entry order."""
    n = 8 * WINDOW  # 512 tokens: LOD2 gists (16 tokens) and LOD1 gists (4) around a needle expanded to LOD0

    def centres(lo: int, hi: int, span: int) -> list[float]:
        return [p + (span - 1) / 2 for p in range(lo, hi, span)]
    older = [float(p) for p in range(96, 104)]  # the needle's two LOD0 blocks
    real = centres(0, 96, 16) + older + centres(104, 112, 4) + centres(112, 496, 16) + [float(p) for p in range(496, n)]
    t = torch.tensor(real)[None]
    ones = torch.ones_like(t, dtype=torch.bool)
    run = [real.index(p) for p in older]
    for mode, spacing in (("bounded", None), ("entries", 1.0)):
        out = base_positions(t, ones, mode=mode, window=WINDOW, recent=RECENT)[0]
        gaps = out[run][1:] - out[run][:-1]
        if spacing is None:
            assert gaps.max() < 0.2  # the squeeze the entries mode exists to avoid
        else:
            assert torch.equal(gaps, torch.full_like(gaps, spacing))
            assert out.max() <= WINDOW - 1 and (out[1:] > out[:-1]).all()


def test_entries_mode_changes_positions_only_from_an_edited_entry_on():
    """Collapsing older entries (fewer entries after some point) leaves the positions before the
    edit as they were: the decode KV cache's suffix rule holds in this mode too."""
    n = 12 * WINDOW
    before = [float(p) for p in range(0, 16)] + [p + 15.5 for p in range(16, n - 2 * RECENT, 32)] + \
        [float(p) for p in range(n - 2 * RECENT, n)]
    after = before[:8] + [11.5] + before[16:]  # tokens 8..15 collapsed into one gist
    a = base_positions_list(before, mode="entries", window=WINDOW, recent=RECENT)
    b = base_positions_list(after, mode="entries", window=WINDOW, recent=RECENT)
    assert a[:8] == b[:8] and a[16] != b[9]  # before the edit unchanged; the entries after it move up
    assert a[8:16] == [float(i) for i in range(8, 16)]  # one apart while they fit
    assert max(a) <= WINDOW - 1 and max(b) <= WINDOW - 1
    assert a[-RECENT:] == b[-RECENT:]  # the exact region does not move either


@pytest.mark.parametrize("mode", ["global", "bounded", "entries", "slots"])
def test_incremental_positions_equal_the_full_map_through_appends_and_edits(mode):
    """The decoder's O(1)-per-append map returns exactly base_positions_list's floats, whether the
    session grew by one token (the memo path), made room, grew a level or was refocused (recomputed)."""
    import random  # noqa: PLC0415

    rng = random.Random(0)
    wc = WorkingContext.build(20, block_size=4, max_lod=3, max_entries=40, recent_tokens=RECENT)
    inc = IncrementalBasePositions(mode=mode, window=WINDOW, recent=RECENT)
    memo_hits = 0
    for step in range(12 * WINDOW):
        wc.append_tokens(1, over_budget=True)
        while len(wc) > wc.max_entries:  # make room: collapse the oldest collapsible group
            wc.collapse(next(i for i in range(len(wc)) if wc.check_collapse(i) is None))
        if step % 37 == 0:  # an edit elsewhere: expand a random expandable gist, as a refocus would
            ok = [i for i in range(len(wc)) if wc[i][0] > 0 and wc.check_expand(i) is None]
            if ok:
                wc.expand(rng.choice(ok))
        pos = wc.positions()
        before = inc._last_out
        got = inc(pos)
        memo_hits += got[:-1] == before and len(got) == len(before) + 1
        assert got == base_positions_list(pos, mode=mode, window=WINDOW, recent=RECENT), step
    assert memo_hits > WINDOW  # the fast path did run (most steps are plain appends)


@pytest.mark.parametrize("n", [9, 63, 100, 6400, 10**6])
def test_slots_number_the_real_entries_from_zero_at_every_length(n):
    """Inside the window and far past it alike: entry i at position i (raw runs one apart, no gap before the
    tail, every position below the budget); padding untouched; the list map equals the tensor map."""
    pos, mask = wc_positions(n, max_lod=10)
    out = base_positions(pos, mask, mode="slots", window=WINDOW, recent=RECENT)
    k = int(mask.sum())
    assert torch.equal(out[mask], torch.arange(k, dtype=out.dtype))
    assert torch.equal(out[~mask], pos[~mask])
    real = pos[mask].tolist()
    assert base_positions_list(real, mode="slots", window=WINDOW, recent=RECENT) == out[mask].tolist()


def test_slots_need_the_budget_inside_the_window():
    load_config(TINY + ["mc.positions=slots"])  # 32 entries in a 64-token window: fine
    with pytest.raises(ConfigError, match="mc.max_entries.*slots"):
        load_config(TINY + ["mc.positions=slots", "model.max_seq_len=24", "eval.tail_tokens=4"])
