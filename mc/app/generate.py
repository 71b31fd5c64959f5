"""Text generation from a trained run: the logic behind ``scripts/mc_generate.py`` (see obsidian Inference).

Owns the CLI (:func:`main`): load a run folder through :func:`mc.build.load_run`, read the prompt
(``--prompt``, ``--prompt-file`` or stdin), stream it into a session, decode with refocus on
schedule (KV cache on unless ``--no-kv-cache``), print tokens as they come, and optionally the
working context's LOD map around each refocus (:func:`lod_map_text`) and a JSON record.

Bad input (a missing or unfinished run folder, an empty prompt, a prompt whose token ids the run's
model cannot take, non-finite weights) ends with one line on stderr and exit status 2; a ``--json`` file
that cannot be written (disk full, permission, a read-only folder) with one line and exit status 1.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence, TextIO

import torch

from mc.io import WriteError, describe_os_error

EXIT_BAD_INPUT, EXIT_WRITE = 2, 1


class GenerateError(ValueError):
    """Bad input for the generation CLI; the message is the one line the user sees."""


def lod_map_text(wc) -> str:
    """The working context as text: one character per entry (its LOD), then the token span each run
    of equal-LOD entries covers, e.g. ``1111000 | L1 x4 [0,32) L0 x3 [32,35)``."""
    entries = wc.entries
    K = wc.block_size
    chars = "".join(str(lod) if lod < 10 else "+" for lod, _ in entries)
    runs, i = [], 0
    while i < len(entries):
        j = i
        while j + 1 < len(entries) and entries[j + 1][0] == entries[i][0]:
            j += 1
        lod = entries[i][0]
        start, end = entries[i][1] * K ** lod, (entries[j][1] + 1) * K ** lod
        runs.append(f"L{lod} x{j - i + 1} [{start},{end})")
        i = j + 1
    return f"{chars} | {' '.join(runs)}"


def read_prompt(prompt: str | None, prompt_file: Path | None, stdin: TextIO) -> str:
    """The prompt text from exactly one source; an empty prompt or a file that is not UTF-8 is a GenerateError."""
    if prompt is not None:
        text, where = prompt, "--prompt"
    elif prompt_file is not None:
        if prompt_file.is_dir():
            raise GenerateError(f"--prompt-file {prompt_file} is a directory; pass a text file")
        if not prompt_file.exists():
            raise GenerateError(f"--prompt-file {prompt_file} does not exist; pass a text file")
        try:
            text = prompt_file.read_bytes().decode("utf-8")
        except OSError as exc:  # unreadable (permissions, a device that fails): the path and the cause
            raise GenerateError(f"--prompt-file {prompt_file} cannot be read: {describe_os_error(exc)}") from exc
        except UnicodeDecodeError as exc:
            raise GenerateError(f"--prompt-file {prompt_file} is not UTF-8 text (byte {exc.start}); "
                                "the byte tokenizer reads UTF-8: convert the file first") from exc
        where = f"--prompt-file {prompt_file}"
    else:
        if stdin.isatty():
            raise GenerateError("no prompt: pass --prompt TEXT, --prompt-file F, or pipe text on stdin")
        text, where = stdin.read(), "stdin"
    if text == "":
        raise GenerateError(f"the prompt from {where} is empty; give at least one character")
    return text


def prompt_ids(text: str, tokenizer, vocab_size: int) -> torch.Tensor:
    """The prompt's ids ``[n]`` long as the run's tokenizer frames a prompt (``[BOS] + bytes`` for the byte
    tokenizer; the model's own framing for ``model=hf``), checked against the run's vocabulary (an id it cannot
    take is a GenerateError naming the first such character or token)."""
    ids = tokenizer.encode_prompt(text)
    if not ids:
        raise GenerateError("the prompt encodes to no tokens; give some text")
    bad = next((i for i, t in enumerate(ids) if not 0 <= t < vocab_size), None)
    if bad is None:
        return torch.tensor(ids, dtype=torch.long)
    if not getattr(tokenizer, "byte_level", False):
        raise GenerateError(f"the prompt's token {bad} (id {ids[bad]}) is outside the run's vocabulary of {vocab_size} "
                            "ids (model.vocab_size): the tokenizer does not match the run's model")
    if bad == 0:
        raise GenerateError(f"the tokenizer's BOS id {ids[0]} is outside the run's vocabulary of {vocab_size} ids "
                            "(model.vocab_size): this run was not trained with the byte tokenizer")
    char, offset = "?", 1  # ids[1:] are the text's UTF-8 bytes: find the character holding byte bad-1
    for c in text:
        offset += len(c.encode("utf-8"))
        if offset > bad:
            char = c
            break
    raise GenerateError(f"the prompt's token {bad} (id {ids[bad]}, from {char!r}) is outside the run's vocabulary "
                        f"of {vocab_size} ids (model.vocab_size); use characters it was trained on")


class TokenPrinter:
    """Streams generated tokens as text through the run's tokenizer, so what is printed is what the JSON's
    ``text`` holds (bytes for the byte tokenizer, BPE pieces for ``model=hf``).

    Each token re-decodes the generated ids and prints what the text grew by. Text that ends in U+FFFD
    (a character whose bytes are split over tokens) or that does not extend what was printed (a tokenizer
    that rewrites earlier text when more follows) is held back until it does; :meth:`finish` prints the
    rest, so the streamed text equals ``tokenizer.decode(tokens)``. Re-decoding is O(n) per token: far
    below a decode step's cost at the lengths generation runs to.
    """

    def __init__(self, out: TextIO | None, tokenizer) -> None:
        self.out = out
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.printed = ""

    def _emit(self, text: str) -> None:
        new = text[len(self.printed):]
        if new:
            self.out.write(new)
            self.out.flush()
        self.printed = text

    def __call__(self, tid: int) -> None:
        if self.out is None:
            return
        self.ids.append(tid)
        text = self.tokenizer.decode(self.ids)
        if text.startswith(self.printed) and not text.endswith("\ufffd"):
            self._emit(text)

    def finish(self) -> None:
        if self.out is None:
            return
        text = self.tokenizer.decode(self.ids)
        if text.startswith(self.printed):
            self._emit(text)
        else:  # printed text cannot be taken back: say where the final text differs
            self.out.write(f"\n[the tokenizer rewrote earlier text; final: {text!r}]")
        self.out.write("\n")
        self.out.flush()


def _begin(ctrl, ids: torch.Tensor):
    try:
        return ctrl.begin_session(ids)
    except ValueError as exc:  # the session refused the prompt (e.g. longer than its working context can hold)
        raise GenerateError(f"the prompt ({ids.numel()} tokens) does not fit a session of this run: {exc}") from exc


def generate_text(ctrl, tokenizer, text: str, max_new_tokens: int, *, temperature: float = 0.0, top_k: int = 0,
                  seed: int | None = None, use_cache: bool = True, out: TextIO | None = None,
                  wc_out: TextIO | None = None, notes: TextIO | None = None) -> dict:
    """Prompt ``text`` -> the record ``--json`` writes (text, tokens, speeds, refocus timings and log).

    A base without the cached forward (``model=hf``) decodes without the KV cache, with a note on
    ``notes`` (stderr by default); the record's ``kv_cache`` says which way it ran.

    Prompt speed = the prompt's tokens over the time to stream them into the session plus the first
    base-model pass over the working context (the cache prefill). Decode speed = generated tokens
    over the decode loop's time, refocuses excluded (``refocus_ms`` has them, cache rebuild included), and refocus
    checks (``allocator.inference.refocus_check``: ``check_ms``, and ``refocus_checks``, whether each undid its refocus).
    With any inference call compiled (``compile.decode``, ``compile.gistnet.inference``,
    ``compile.lensnet.inference``), a throwaway session over the same prompt decodes ``mc.block_size + 1`` tokens
    and refocuses first (the prefill, the one-entry step, a one-block gist, LensNet), timed apart as ``warmup_s``, so
    neither speed counts compilation; a bucket the session grows into later still compiles inside the loop, once.
    """
    from mc.decode import NO_KV_CACHE, DecodeStats, decoder_for, supports_kv_cache  # noqa: PLC0415
    from mc.sampling import Sampler  # noqa: PLC0415

    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise GenerateError(f"--max-new-tokens must be an integer >= 1, got {max_new_tokens!r}")
    try:
        sampler = Sampler(temperature, top_k, seed, device=ctrl.device)
    except ValueError as exc:
        raise GenerateError(f"{exc}") from exc
    ids = prompt_ids(text, tokenizer, ctrl.cfg.model.vocab_size)
    if use_cache and not supports_kv_cache(ctrl.base):  # model=hf: decode the reference way, and say so
        (notes or sys.stderr).write(f"mc_generate: note: {NO_KV_CACHE.format(type(ctrl.base).__name__)}; "
                                    "decoding without it\n")
        use_cache = False
    if use_cache:
        decoder_for(ctrl)  # built before the clock starts: its one-time set-up (cache, tables) is not the prompt's
    warmup_s = 0.0
    comp = ctrl.cfg.compile
    if (comp.decode != "off" and use_cache) or {comp.gistnet.inference, comp.lensnet.inference} != {"off"}:
        w0 = time.perf_counter()
        _begin(ctrl, ids)  # a throwaway session: the timed one below starts afresh
        ctrl.generate(ctrl.cfg.mc.block_size + 1, use_cache=use_cache)
        ctrl.refocus()
        if use_cache:
            decoder_for(ctrl).logits(ctrl.session)  # the rebuild after a refocus, as generate runs it
        warmup_s = time.perf_counter() - w0
    t0 = time.perf_counter()
    s = _begin(ctrl, ids)
    _ = decoder_for(ctrl).logits(s) if use_cache else ctrl.next_token_logits()  # prefill, part of the prompt's cost
    prompt_s = time.perf_counter() - t0
    if wc_out is not None:
        wc_out.write(f"[wc] after the prompt ({s.num_tokens} tokens): {lod_map_text(s.wc)}\n")

    def on_refocus(when: str, session) -> None:
        wc_out.write(f"[wc] {when} refocus at {session.num_tokens} tokens: {lod_map_text(session.wc)}\n")
        wc_out.flush()

    printer = TokenPrinter(out, tokenizer)
    stats = DecodeStats()
    tokens = ctrl.generate(max_new_tokens, sampler=sampler, use_cache=use_cache, on_token=printer,
                           on_refocus=on_refocus if wc_out is not None else None, stats=stats)
    printer.finish()
    return {"text": tokenizer.decode(tokens), "tokens": tokens.tolist(), "prompt_tokens": int(ids.numel()),
            "prompt_tokens_per_s": ids.numel() / max(prompt_s, 1e-9),
            "decode_tokens_per_s": max_new_tokens / max(stats.decode_s, 1e-9),
            "refocus_ms": stats.refocus_ms, "refocus_log": stats.refocus_log, "kv_cache": use_cache,
            "refocus_checks": stats.checks, "check_ms": stats.check_ms,
            "compile": {"decode": comp.decode if use_cache else "off", "gistnet": comp.gistnet.inference,
                        "lensnet": comp.lensnet.inference}, "warmup_s": warmup_s,
            "temperature": temperature, "top_k": top_k, "seed": seed}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mc_generate.py", description="Generate text from a trained MegaContext run.")
    p.add_argument("--run-dir", type=Path, required=True, help="the run folder (runs/<name>: config.json, stage1/, stage2/)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="the prompt text (default: read stdin)")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from this UTF-8 file")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (default 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    p.add_argument("--top-k", type=int, default=0, help="sample among the K most likely ids (0 = all)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling (the same seed, the same text)")
    p.add_argument("--show-wc", action="store_true", help="print the working context's LOD map before and after each refocus (stderr)")
    p.add_argument("--no-kv-cache", action="store_true", help="re-run the base model over the whole working context per token")
    p.add_argument("--json", type=Path, default=None, help="write text, tokens, speeds and the refocus log here")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="default: the run's train.device")
    p.add_argument("overrides", nargs="*", help="config overrides key.path=value on the run's recorded config, for "
                   "inference settings (e.g. compile.decode=default compile.gistnet.inference=default)")
    return p


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    args = build_parser().parse_args(argv)
    from mc.build import load_run, resolve_device  # noqa: PLC0415
    from mc.config import ConfigError  # noqa: PLC0415
    from mc.io import write_json  # noqa: PLC0415
    from mc.train.checkpoint import CheckpointError  # noqa: PLC0415

    try:
        if args.json is not None and args.json.is_dir():  # found now, not after the whole generation
            raise GenerateError(f"--json {args.json} is a directory; pass a file path (e.g. {args.json / 'out.json'})")
        text = read_prompt(args.prompt, args.prompt_file, stdin)
        device = resolve_device(args.device) if args.device else None
        ctrl, tok = load_run(args.run_dir, device=device, overrides=args.overrides)
        rec = generate_text(ctrl, tok, text, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                            seed=args.seed, use_cache=not args.no_kv_cache, out=stdout,
                            wc_out=stderr if args.show_wc else None, notes=stderr)
    except (GenerateError, ConfigError, CheckpointError, FileNotFoundError, NotADirectoryError) as exc:
        stderr.write(f"mc_generate: error: {exc}\n")
        return EXIT_BAD_INPUT
    rec["run_dir"] = str(args.run_dir)
    stderr.write(f"[mc_generate] prompt {rec['prompt_tokens']} tokens at {rec['prompt_tokens_per_s']:.0f} tok/s; "
                 f"{len(rec['tokens'])} new tokens at {rec['decode_tokens_per_s']:.0f} tok/s "
                 f"({'KV cache' if rec['kv_cache'] else 'no KV cache'}); {len(rec['refocus_ms'])} refocuses\n")
    if args.json is not None:
        try:
            write_json(args.json, rec)
        except WriteError as exc:  # the text went to stdout already; the record could not be kept
            stderr.write(f"mc_generate: error: {exc}\n")
            return EXIT_WRITE
    return 0
