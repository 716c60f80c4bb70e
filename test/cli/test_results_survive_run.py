"""`run -o` stopped by a signal (no torchrun): the profile is written whole."""
import subprocess
import sys

import pytest

from test_results_survive import _env, _needs_gloo  # noqa: E402


# ---- `run -o` stopped by a signal (no torchrun) ----------------------------------

STEP = """\
import ctypes
import sys
import time
import torch


def step():
    x = torch.zeros(1024, 1024, dtype=torch.uint8)                  # MARK
    if "--in-c" in sys.argv:
        # a C call that signals do not interrupt (a collective that never
        # completes): the main thread never runs a Python signal handler
        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)
        libc.pthread_mutex_lock(mutex)
        open("sleeping", "w").close()        # the line before the hang
        libc.pthread_mutex_lock(mutex)                                # HANG
    open("sleeping", "w").close()
    # short sleeps, not one long one: a signal that lands between the last
    # check for pending handlers and the sleep's system call (the trace hook
    # widens that gap) would otherwise wait for the whole sleep
    for _ in range(1200): time.sleep(0.1)                             # HANG
    return x


step()
"""


def _run_until_sleeping(tmp_path, *extra):
    import time
    (tmp_path / "step.py").write_text(STEP)
    proc = subprocess.Popen([sys.executable, "-m", "pytorch_memlab", "run", "-d", "cpu",
                             "-f", "step", "-o", "p.json", "step.py", *extra], cwd=tmp_path,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "sleeping").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)     # from the line that made the file into the hanging one, on a busy machine
    return proc


def _hang_line(path, kind="HANG"):
    import json
    doc = json.loads(path.read_text())
    (record,) = doc["functions"]
    lines = [line for line in record["lines"] if f"# {kind}" in line["code"]]
    return doc, [line["raised"] for line in lines]


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_run_stopped_by_a_signal_writes_its_file(tmp_path, signum):
    import signal
    _needs_gloo()
    proc = _run_until_sleeping(tmp_path)
    proc.send_signal(getattr(signal, signum))
    out, err = proc.communicate(timeout=120)
    doc, raised = _hang_line(tmp_path / "p.json")
    if signum == "SIGTERM":     # the default action: killed by the signal
        assert proc.returncode == -signal.SIGTERM, err
        assert raised == [None, "SIGTERM"] and doc["run"]["exit_status"] == 143, err
    else:                       # Python's: KeyboardInterrupt, `run` ends with 130
        assert proc.returncode == 130, err
        assert raised == [None, "SIGINT"] and doc["run"]["exit_status"] == 130, err
        assert "KeyboardInterrupt" in err


def test_run_stuck_in_a_c_call_still_writes_on_sigterm(tmp_path):
    import signal
    import time
    _needs_gloo()
    proc = _run_until_sleeping(tmp_path, "--in-c")
    try:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while not (tmp_path / "p.json").exists() and time.monotonic() < deadline:   # atomic
            time.sleep(0.05)
        assert proc.poll() is None      # still stuck: nothing ran on the main thread
    finally:
        proc.kill()
        proc.communicate()
    doc, raised = _hang_line(tmp_path / "p.json")
    assert raised == ["SIGTERM", None] and doc["run"]["exit_status"] == 143


def test_stop_writer_keeps_its_place_and_the_programs_view():
    """In-process: a handler set after install is chained to (and getsignal
    returns it); SIG_IGN is honoured; uninstall gives the program's back."""
    import signal

    from pytorch_memlab.line_profiler.signals import StopWriter
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def program(signum, frame):
        seen.append(("program", signum))

    writer = StopWriter(lambda signum, frame: seen.append(("write", signum)))
    assert writer.install()
    try:
        assert signal.getsignal(signal.SIGTERM) == before
        assert signal.signal(signal.SIGTERM, program) == before
        assert signal.getsignal(signal.SIGTERM) is program
        signal.raise_signal(signal.SIGTERM)
        assert seen == [("write", signal.SIGTERM), ("program", signal.SIGTERM)]
        signal.raise_signal(signal.SIGTERM)     # the program went on: written again
        assert seen[2:] == [("write", signal.SIGTERM), ("program", signal.SIGTERM)]
        assert signal.signal(signal.SIGTERM, signal.SIG_IGN) is program
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        signal.raise_signal(signal.SIGTERM)
        assert len(seen) == 4
        assert signal.signal(signal.SIGTERM, program) is signal.SIG_IGN
        signal.raise_signal(signal.SIGTERM)     # ours again, first
        assert seen[4:] == [("write", signal.SIGTERM), ("program", signal.SIGTERM)]
        # a wakeup fd of the program's own (asyncio's): the handler writes itself
        import socket
        receive, send = socket.socketpair()
        send.setblocking(False)
        ours = signal.set_wakeup_fd(send.fileno())
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            signal.set_wakeup_fd(ours)
            receive.close()
            send.close()
        assert seen[6:] == [("write", signal.SIGTERM), ("program", signal.SIGTERM)]
    finally:
        writer.uninstall()
    assert signal.signal is not writer._signal and signal.getsignal(signal.SIGTERM) is program
    signal.signal(signal.SIGTERM, before)
