"""``run -o`` stopped by a signal while the program holds the lock the write
needs (the profiler's): handled at once, written once, and again on the next
signal; two writers of one file never share a temporary file.  Through a real
``python -m pytorch_memlab run`` process and real signals."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANDLED_WITHIN_S = 0.5

# Each write of p.json is logged (exit status, lines a signal marked), read
# back from the temporary file it went to: a write counted, not guessed.
HOLDING = """\
import gc
import json
import time

import torch

import pytorch_memlab.records.saved as saved
from pytorch_memlab.line_profiler import LineProfiler

(profiler,) = [o for o in gc.get_objects() if type(o) is LineProfiler]
original_save = saved.save


def logged_save(profile, path, *args):
    original_save(profile, path, *args)
    with open(path) as f:
        doc = json.load(f)
    (record,) = doc["functions"]
    marks = [line["code"].split("# ")[-1] for line in record["lines"] if line["raised"]]
    with open("writes.log", "a") as log:
        log.write(" ".join([str(doc["run"]["exit_status"]), *marks]) + "\\n")


saved.save = logged_save


def hold(i, name):
    if i == 0:
        open(name, "w").close()
    time.sleep(0.01)


def step():
    x = torch.zeros(1024, 1024, dtype=torch.uint8)
    for name in ("holding0", "holding1"):
        try:
            with profiler._lock:        # the write needs it: held when the signal lands
                if name == "holding0":
                    for i in range(3000): hold(i, name)                 # HOLD0
                else:
                    for i in range(3000): hold(i, name)                 # HOLD1
        except KeyboardInterrupt:
            open("caught" + name[-1], "w").close()
    return x


step()
"""


def _start(tmp_path):
    (tmp_path / "holding.py").write_text(HOLDING)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.Popen([sys.executable, "-m", "pytorch_memlab", "run", "-d", "cpu",
                             "-f", "step", "-o", "p.json", "holding.py"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path, proc, limit_s):
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _writes(tmp_path):
    return (tmp_path / "writes.log").read_text().splitlines()


def test_sigint_while_the_write_lock_is_held_is_handled_at_once_twice(tmp_path):
    proc = _start(tmp_path)
    try:
        for n in (0, 1):
            assert _wait_for(tmp_path / f"holding{n}", proc, 120), proc.communicate()
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            assert _wait_for(tmp_path / f"caught{n}", proc, 30), proc.communicate()
            took = time.monotonic() - sent
            assert took < HANDLED_WITHIN_S, f"SIGINT {n + 1} handled after {took:.2f} s"
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 0, err
    # one write per signal, the line each one stopped marked, then the end's
    assert _writes(tmp_path) == ["130 HOLD0", "130 HOLD0 HOLD1", "0 HOLD0 HOLD1"], err


def test_sigterm_while_the_write_lock_is_held_writes_once_and_ends(tmp_path):
    proc = _start(tmp_path)
    try:
        assert _wait_for(tmp_path / "holding0", proc, 120), proc.communicate()
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        deadline = sent + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        took = time.monotonic() - sent
    finally:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == -signal.SIGTERM, err
    assert took < HANDLED_WITHIN_S, f"SIGTERM handled after {took:.2f} s"
    assert _writes(tmp_path) == ["143 HOLD0"], err
    assert json.loads((tmp_path / "p.json").read_text())["run"]["exit_status"] == 143


def _two_writers_at_once(monkeypatch, write):
    """``write(n)`` from two threads, both done writing before either renames:
    the temporary files they renamed."""
    both_written = threading.Barrier(2, timeout=10)
    renamed, errors = [], []
    real_replace = os.replace

    def replace(src, dst):
        renamed.append(str(src))
        both_written.wait()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)

    def writer(n):
        try:
            write(n)
        except Exception as exc:
            errors.append(exc)
            both_written.abort()

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return renamed


def test_two_writers_of_one_file_use_two_temporary_files(tmp_path, monkeypatch):
    from pytorch_memlab.cli.run import _replace
    from pytorch_memlab.records.ranks import write_rank_file

    def write_text(data, path):
        with open(path, "w") as f:
            f.write(data)

    renamed = _two_writers_at_once(
        monkeypatch, lambda n: _replace(write_text, f"{n}" * 100_000, str(tmp_path / "p.json")))
    assert len(set(renamed)) == 2, renamed
    assert (tmp_path / "p.json").read_text() in ("1" * 100_000, "2" * 100_000)
    assert sorted(os.listdir(tmp_path)) == ["p.json"]     # no temporary file left

    renamed = _two_writers_at_once(
        monkeypatch, lambda n: write_rank_file({"rank": {"rank": 0}, "n": n}, str(tmp_path)))
    assert len(set(renamed)) == 2, renamed
    assert json.loads((tmp_path / "rank0.json").read_text())["n"] in (1, 2)
    assert sorted(os.listdir(tmp_path)) == ["p.json", "rank0.json"]
