"""A sweep's documents read by several CPU processes at once (``eval.long_range.workers``).

Owns :func:`read_in_workers`. Reading one sweep document is thousands of small ops on small tensors (d = 64 nets
over about a hundred entries): a process reads no faster with two threads than with one, so on a machine with W
cores W processes of one thread each read W documents at once (obsidian Evaluation, "Sweep workers"). The workers
are forked from the evaluating process, so they share its nets as they are (nothing is rebuilt or reloaded), and
each document is read exactly as in process: the same code, nets and seeds, the rows returned in the sweep's order.
A worker that raises or dies fails the whole sweep with its error; no document is dropped. Under CUDA (a forked
process cannot use its parent's CUDA context), where ``fork`` does not exist, or with a net compiled for inference
(Dynamo guards on the thread count, so a one-thread worker would be a recompile after the freeze; two threads per
process on two cores read 2.3x slower than one process), one line says so and the sweep reads in this process.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import traceback
from typing import Any, Callable, Sequence

import torch


def _fork_ok() -> str:
    """Why the sweep cannot fork here ("" when it can)."""
    if "fork" not in mp.get_all_start_methods():
        return "this platform has no fork"
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return "CUDA is in use (a forked process cannot use its parent's CUDA context)"
    return ""


def _tick(done, bar) -> None:
    if bar is not None:
        bar.update(done.value - bar.n)


def _died(w: int, n: int, p) -> RuntimeError:
    return RuntimeError(f"sweep worker {w} of {n} died (exit code {p.exitcode}) before returning its documents; "
                        "rerun with eval.long_range.workers=1 to read in one process")


def _worker(read: Callable[[Any], dict], items: Sequence, idx: list[int], send, done) -> None:
    torch.set_num_threads(1)  # the parent and its siblings use the other cores
    try:
        out = []
        for i in idx:
            out.append((i, read(items[i])))
            with done.get_lock():
                done.value += 1
        send.send(("rows", out))
    except BaseException:  # noqa: BLE001 - every failure goes to the parent, which raises it
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()


def read_in_workers(read: Callable[[Any], dict], items: Sequence, workers: int, bar=None, *,
                    serial_reason: str = "") -> list[dict]:
    """``[read(x) for x in items]``, in ``workers`` processes (this one included) when that is more than 1, the
    process may fork and the caller gives no ``serial_reason`` (why its reads must stay in this process). ``bar`` (a
    tqdm bar or None) counts every process's documents."""
    n = min(workers, len(items))
    why_not = (serial_reason or _fork_ok()) if n > 1 else ""
    if why_not:
        print(f"[eval] eval.long_range.workers={workers}: reading in this process only, {why_not}", file=sys.stderr)
    if n <= 1 or why_not:
        rows = []
        for x in items:
            rows.append(read(x))
            if bar is not None:
                bar.update(1)
        return rows
    ctx = mp.get_context("fork")
    done = ctx.Value("i", 0)
    shards = [list(range(w, len(items), n)) for w in range(n)]  # interleaved: every worker gets every length
    procs = []
    threads = torch.get_num_threads()
    try:
        for w in range(1, n):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, args=(read, items, shards[w], send, done), daemon=True)
            p.start()
            send.close()  # the child holds the only send end: its death is an EOF here
            procs.append((w, p, recv))
        torch.set_num_threads(1)
        rows: dict[int, dict] = {}
        for i in shards[0]:
            rows[i] = read(items[i])
            with done.get_lock():
                done.value += 1
            _tick(done, bar)
        for w, p, recv in procs:
            while not recv.poll(0.5):
                _tick(done, bar)
                if not p.is_alive() and not recv.poll():
                    raise _died(w, n, p)
            try:
                kind, payload = recv.recv()
            except EOFError:
                p.join()
                raise _died(w, n, p) from None
            if kind == "error":
                raise RuntimeError(f"sweep worker {w} of {n} failed:\n{payload}")
            rows.update(payload)
            p.join()
        _tick(done, bar)
        return [rows[i] for i in range(len(items))]
    finally:
        torch.set_num_threads(threads)
        for _, p, _ in procs:
            if p.is_alive():
                p.terminate()
            p.join()
