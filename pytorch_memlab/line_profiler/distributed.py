"""Profiling under ``torchrun``: each rank profiles its own device, writes
``OUT/rank<R>.json``, and rank 0 alone prints one table merging every rank.

The profiles travel over the program's own ``torch.distributed`` process group
(``gather_object`` to rank 0), at the first of: the program calling
``destroy_process_group()`` (hooked for that), or the program's end while the
group is still up.  Without a usable group, rank 0 merges the files instead,
waiting up to ``PYTORCH_MEMLAB_WAIT`` seconds (default 60) for them; a file
counts only if it carries this run's ``TORCHELASTIC_RUN_ID``.  Every rank writes
its file before any exchange (write to a temporary name, then ``os.replace``),
so a rank that dies later, or another rank's death, still leaves it.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..records.ranks import rank_path, read_rank_dir, write_rank_file
from ..reports.rank_table import merged_text


OUT_ENV = "PYTORCH_MEMLAB_OUT"
WAIT_ENV = "PYTORCH_MEMLAB_WAIT"


@dataclass(frozen=True)
class RankEnv:
    """What torchrun tells each worker through the environment."""
    rank: int
    world_size: int
    local_rank: int
    run_id: str

    def device(self) -> str:
        """The device this rank profiles: its LOCAL_RANK's GPU, else the CPU."""
        import torch
        if torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return "cpu"

    def info(self) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world_size,
                "local_rank": self.local_rank, "host": socket.gethostname(),
                "run_id": self.run_id}


def rank_env(environ: Optional[dict[str, str]] = None) -> Optional[RankEnv]:
    """The rank this process is, when started by torchrun (RANK and WORLD_SIZE
    set); None for an ordinary single process."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", rank))
    except ValueError:
        raise ValueError(f"RANK={env['RANK']!r}, WORLD_SIZE={env['WORLD_SIZE']!r}: "
                         "expected integers, as torchrun sets them") from None
    return RankEnv(rank, world, local, env.get("TORCHELASTIC_RUN_ID", ""))


class RankReporter:
    """Ends one rank's profiling: file, exchange, and (rank 0) the merged table.

    ``collect()`` returns the rank's saved-profile document.  ``finish`` runs at
    the program's end; ``install`` also makes ``destroy_process_group`` run the
    exchange first, while the group can still carry it."""

    def __init__(self, env: RankEnv, out_dir: Optional[str],
                 collect: Callable[[], dict[str, Any]],
                 on_merged: Optional[Callable[[list[dict[str, Any]]], None]] = None) -> None:
        self.env = env
        self.out_dir = out_dir
        self.collect = collect
        self.on_merged = on_merged
        self.exchanged = False
        self.gather_failed = False     # then rank 0 merges the files at the end
        self._original: Optional[Callable[..., Any]] = None

    # ---- the destroy_process_group hook ----------------------------------------

    def install(self) -> None:
        import torch.distributed as dist
        if not dist.is_available() or self._original is not None:
            return
        original = self._original = dist.destroy_process_group

        def destroy_process_group(group: Any = None) -> Any:
            if group is None and not self.exchanged:
                self._exchange_safely()
            return original(group)

        destroy_process_group.__wrapped__ = original  # type: ignore[attr-defined]
        dist.destroy_process_group = destroy_process_group

    def uninstall(self) -> None:
        import torch.distributed as dist
        if self._original is not None:
            dist.destroy_process_group = self._original
            self._original = None

    # ---- ending ------------------------------------------------------------------

    def _document(self) -> dict[str, Any]:
        doc = self.collect()
        doc["rank"] = self.env.info()
        return doc

    def _write(self, doc: dict[str, Any]) -> None:
        if self.out_dir is None:
            return
        try:
            write_rank_file(doc, self.out_dir)
        except OSError as exc:
            print(f"pytorch_memlab: rank {self.env.rank}: could not write "
                  f"{rank_path(self.out_dir, self.env.rank)}: {exc}", file=sys.stderr)

    def write_file(self) -> None:
        """Write this rank's file now (it is written again at the end)."""
        self._write(self._document())

    def _exchange_safely(self) -> None:
        try:
            self._exchange()
        except Exception as exc:  # never break the program's own shutdown
            # (gather_object needs numpy, for one): the files are written already
            self.exchanged = self.gather_failed = True
            then = ("rank 0 merges the rank files instead" if self.out_dir is not None
                    else f"no output folder (-o DIR/ or {OUT_ENV}=DIR/) to merge the "
                         "rank files from")
            print(f"pytorch_memlab: rank {self.env.rank}: could not gather the profiles "
                  f"over the process group: {exc!r}; {then}", file=sys.stderr)

    def _exchange(self) -> None:
        """Write the file, gather every rank's document on rank 0, print there."""
        doc = self._document()
        self._write(doc)
        self.exchanged = True
        import torch
        import torch.distributed as dist
        gathered: Optional[list[Any]] = [None] * dist.get_world_size() \
            if dist.get_rank() == 0 else None
        if dist.get_backend() == "nccl":
            # gather_object stages through the current GPU: make it this rank's
            with torch.cuda.device(self.env.local_rank % torch.cuda.device_count()):
                dist.gather_object(doc, gathered, dst=0)
        else:
            dist.gather_object(doc, gathered, dst=0)
        if gathered is not None:
            self._report([d for d in gathered if d is not None])

    def _report(self, docs: list[dict[str, Any]]) -> None:
        sys.stdout.flush()
        sys.stdout.write(merged_text(docs, self.out_dir, self.env.world_size) + "\n")
        sys.stdout.flush()
        if self.on_merged is not None:
            self.on_merged(docs)

    def finish(self, failed: bool = False) -> None:
        """At the program's end: gather over the group if it is still up,
        else write the file and (rank 0) merge the files.  A rank whose program
        ``failed`` only writes its file: the other ranks may be waiting in a
        collective it will never join, and torchrun stops them once it exits."""
        self.uninstall()
        if self.exchanged or failed:
            self._write(self._document())     # figures after the exchange, if any
            self.exchanged = True
            if self.gather_failed and not failed and self.env.rank == 0:
                self._merge_files()
            return
        if _group_usable():
            self._exchange_safely()
            if self.exchanged and not self.gather_failed:
                return
        self._write(self._document())
        self.exchanged = True
        if self.env.rank == 0:
            self._merge_files()

    def _merge_files(self) -> None:
        if self.out_dir is None:
            print("pytorch_memlab: no process group to gather the ranks' profiles and no "
                  f"output folder (-o DIR/ or {OUT_ENV}=DIR/) to merge them from",
                  file=sys.stderr)
            return
        deadline = time.monotonic() + float(os.environ.get(WAIT_ENV, "60"))
        run_id = self.env.run_id or None
        while True:
            try:
                docs = read_rank_dir(self.out_dir, run_id)
            except (OSError, ValueError):
                docs = []
            if len(docs) >= self.env.world_size or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if docs:
            if self.gather_failed:
                print(f"pytorch_memlab: rank 0: the table below merges the rank files in "
                      f"{self.out_dir}", file=sys.stderr)
            self._report(docs)


def _group_usable() -> bool:
    try:
        import torch.distributed as dist
        return bool(dist.is_available() and dist.is_initialized())
    except Exception:
        return False


# ---- @profile under torchrun ----------------------------------------------------

_decorator_reporter: Optional[RankReporter] = None


def decorator_reporter(profilers: Callable[[], list[Any]]) -> Optional[RankReporter]:
    """The reporter of ``@profile``'s global profilers (``profilers()`` lists
    them) when this process is a torchrun rank, installed once; else None.
    The files go to ``$PYTORCH_MEMLAB_OUT``."""
    global _decorator_reporter
    env = rank_env()
    if env is None:
        return None
    if _decorator_reporter is None:
        def collect() -> dict[str, Any]:
            docs = [p.to_dict() for p in profilers()]
            doc: dict[str, Any] = docs[0]
            for other in docs[1:]:
                doc["functions"] += other["functions"]
                doc["devices"] += [d for d in other["devices"] if d not in doc["devices"]]
            return doc

        _decorator_reporter = RankReporter(env, os.environ.get(OUT_ENV) or None, collect)
        _decorator_reporter.install()
        if _decorator_reporter.out_dir is not None:
            reporter = _decorator_reporter

            def write_stopped(signum: int, frame: Any) -> None:
                from .signals import signal_name
                for profiler in profilers():
                    profiler._note_stop(frame, signal_name(signum))
                reporter.write_file()

            from .signals import StopWriter
            StopWriter(write_stopped,           # for the process's life
                       lambda: [p._lock for p in profilers()]).install()
    return _decorator_reporter


def rank_device() -> Optional[str]:
    """The default device of a torchrun rank's profiler; None outside torchrun."""
    env = rank_env()
    return None if env is None else env.device()
