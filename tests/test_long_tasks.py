"""The long-range sweep's generated documents (mc.data.long_tasks) and its depth buckets (mc.eval.long_range)."""
import pytest

from mc.data.long_tasks import make_long_doc
from mc.data.tokenizer import ByteTokenizer
from mc.eval.long_range import needle_depth

TOK = ByteTokenizer()


def text(ids) -> str:
    return bytes(int(t) for t in ids[1:]).decode("latin-1")  # ids[0] is BOS


@pytest.mark.parametrize("task", ["passkey", "multi_needle"])
@pytest.mark.parametrize("depth", [0.0, 0.37, 1.0])
def test_document_layout(task, depth):
    """Exact length, the queried needle at its depth, the query naming its key, the answer its value."""
    length = 1024
    doc = make_long_doc(task, length, depth, seed=5, key_len=2, value_len=3)
    assert doc.ids.shape == (length,) and doc.num_tokens == length
    assert len(doc.keys) == (1 if task == "passkey" else 4) == len(set(doc.keys))
    a, b = doc.queried_span
    history = length - (1 + 2 + 1 + 3)  # tokens before the query "\nKEY=VALUE"
    assert a == 2 + round(depth * (history - 9))  # BOS, "\n", then the record; the last start leaves an 8-token slot
    assert TOK.decode(doc.ids[a:b]) == f"{doc.keys[0]}={doc.values[0]}"
    assert TOK.decode(doc.ids[doc.query_start:]) == f"{doc.keys[0]}={doc.answer}"
    assert TOK.decode(doc.ids[doc.answer_span[0]:doc.answer_span[1]]) == doc.answer
    spans = sorted(doc.record_spans)
    assert all(s1[1] < s2[0] for s1, s2 in zip(spans, spans[1:]))  # needles never overlap
    if task == "passkey":
        assert doc.keys == ("PK",)
    assert doc.ids.tolist() == make_long_doc(task, length, depth, seed=5, key_len=2, value_len=3).ids.tolist()
    assert doc.ids.tolist() != make_long_doc(task, length, depth, seed=6, key_len=2, value_len=3).ids.tolist()


def test_haystack_holds_no_needle_characters():
    """The filler is lowercase: an uppercase letter, digit or '=' can only come from a needle or the query."""
    doc = make_long_doc("multi_needle", 2048, 0.5, seed=1, key_len=2, value_len=3)
    inside = set()
    for a, b in doc.record_spans:
        inside |= set(range(a, b))
    inside |= set(range(doc.query_start, doc.num_tokens))
    body = text(doc.ids)
    for i, ch in enumerate(body, start=1):
        if ch.isupper() or ch.isdigit() or ch == "=":
            assert i in inside, (i, ch)


@pytest.mark.parametrize("bad, match", [
    (dict(task="haystack"), "unknown long-range task"),
    (dict(depth=1.5), "depth must be in"),
    (dict(length=20), "cannot hold"),
    (dict(n_needles=0, task="multi_needle"), "n_needles"),
])
def test_bad_arguments_say_what_is_wrong(bad, match):
    args = dict(task="passkey", length=512, depth=0.5, seed=0, key_len=2, value_len=3) | bad
    n = args.pop("n_needles", 4)
    with pytest.raises(ValueError, match=match):
        make_long_doc(args.pop("task"), args.pop("length"), args.pop("depth"), args.pop("seed"), n_needles=n, **args)


def test_needle_depth_is_a_bucket():
    """Depths spread over depth +- jitter (so the cell is not one alignment with the gist grid), clipped
    to [0, 1], the same in every call; jitter 0 is the exact depth."""
    got = [needle_depth(0.5, 0.05, seed) for seed in range(200)]
    assert all(0.45 <= d <= 0.55 for d in got)
    assert len({round(d, 4) for d in got}) > 150  # spread, not a handful of positions
    assert min(got) < 0.46 and max(got) > 0.54
    assert got == [needle_depth(0.5, 0.05, seed) for seed in range(200)]
    assert all(needle_depth(0.5, 0.0, seed) == 0.5 for seed in range(5))
    edge = [needle_depth(0.02, 0.05, seed) for seed in range(100)]
    assert min(edge) == 0.0 and all(0.0 <= d <= 0.07 for d in edge)
    offsets = [(needle_depth(0.3, 0.05, s) - 0.3, needle_depth(0.6, 0.05, s) - 0.6) for s in range(50)]
    assert sum(abs(a - b) > 1e-6 for a, b in offsets) > 45  # each bucket draws its own offset
