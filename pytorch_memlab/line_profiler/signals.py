"""A profiled process stopped by SIGTERM or SIGINT still writes its profile.

``StopWriter(write, locks).install()`` (main thread only) puts one handler on
both signals.  Each signal is written once: by the Python handler when the
main thread runs it, else by a watcher thread that the interpreter's own
C-level handler wakes through ``signal.set_wakeup_fd``: a main thread stuck in
a C call (a collective that never completes, which is where torchrun's SIGTERM
finds a surviving rank) never runs a Python handler, but the thread does, and
reads the main thread's stack from ``sys._current_frames``.  ``locks()`` lists
the locks the write takes (the profilers'); the main thread may hold one when
the signal lands, so the watcher only ever tries them (see "writing").  The
handler then gives the signal its usual effect: the handler installed before
us is called; with none (``SIG_DFL``) the default is restored and the signal
raised again, so the process ends as it would have (SIGTERM: killed by it).
A program that goes on (it caught the KeyboardInterrupt) is written again on
the next signal.  ``write(signum, frame)`` receives the main thread's frame,
to mark the line that was running.

A handler the program installs *after* us must not silence the write:
``signal.signal`` and ``signal.getsignal`` are wrapped while installed, so the
program's handler becomes the one we chain to (and ``getsignal`` returns it),
while ours stays first.  ``SIG_IGN`` from the program is honoured as is (an
ignored signal stops nothing).  A program that calls the unwrapped function
(``from signal import signal`` before profiling began) replaces our handler;
the watcher thread still writes, as long as the wakeup fd is ours.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
import types
from typing import Any, Callable, Optional, Protocol, Sequence

STOPPING = (signal.SIGTERM, signal.SIGINT)
WAIT_FOR_WATCHER_S = 5.0     # the main thread's wait for a write the watcher began
LOCK_POLL_S = 0.01           # the watcher's wait between tries of the write's locks

Write = Callable[[int, Optional[types.FrameType]], None]


class Lock(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...


def _try_acquire(locks: Sequence[Lock]) -> Optional[Sequence[Lock]]:
    """All of ``locks``, or none of them (None): never one held while waiting."""
    held: list[Lock] = []
    for lock in locks:
        if not lock.acquire(blocking=False):
            for taken in reversed(held):
                taken.release()
            return None
        held.append(lock)
    return held


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopWriter:
    def __init__(self, write: Write, locks: Callable[[], Sequence[Lock]] = tuple) -> None:
        self._write = write
        self._locks = locks     # the re-entrant locks ``write`` takes (see "writing")
        self._previous: dict[int, Any] = {}     # the program's handler, per signal
        # re-entrant: a handler may run inside a handler that holds it
        self._state = threading.RLock()     # guards the next three; never held while writing
        self._pending: Optional[tuple[int, Optional[types.FrameType]]] = None
        self._unanswered = 0
        self._idle = threading.Event()      # clear while the watcher writes
        self._idle.set()
        self._sockets: Optional[tuple[socket.socket, socket.socket]] = None
        self._watcher: Optional[threading.Thread] = None
        self._wrapped: Optional[tuple[Any, Any]] = None      # signal.signal, getsignal

    # ---- install / uninstall ---------------------------------------------------------

    def install(self) -> bool:
        """False where signal handlers cannot be set (not the main thread)."""
        if threading.current_thread() is not threading.main_thread() or self._wrapped:
            return False
        set_signal, get_signal = signal.signal, signal.getsignal
        for signum in STOPPING:
            previous = get_signal(signum)
            if previous is signal.SIG_IGN:      # nohup, or a shell's background job
                continue
            self._previous[signum] = previous
            set_signal(signum, self._handle)
        self._wrapped = (set_signal, get_signal)
        signal.signal = self._signal
        signal.getsignal = self._getsignal
        self._start_watcher()
        return True

    def uninstall(self) -> None:
        """Give the program's handlers back their place (the program ended)."""
        if self._wrapped is None:
            return
        set_signal, get_signal = self._wrapped
        signal.signal, signal.getsignal = set_signal, get_signal
        self._wrapped = None
        for signum, previous in self._previous.items():
            if get_signal(signum) == self._handle:
                set_signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()
        self._stop_watcher()

    def _start_watcher(self) -> None:
        receive, send = socket.socketpair()
        send.setblocking(False)
        try:
            before = signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            before = None
        if before != -1:        # someone else's (asyncio's): keep theirs, no watcher
            if before is not None:
                signal.set_wakeup_fd(before)
            receive.close()
            send.close()
            return
        self._sockets = (receive, send)
        self._watcher = threading.Thread(target=self._watch, args=(receive,), daemon=True,
                                         name="pytorch_memlab-signals")
        self._watcher.start()

    def _stop_watcher(self) -> None:
        if self._sockets is None:
            return
        receive, send = self._sockets
        self._sockets = None
        try:
            if signal.set_wakeup_fd(-1) != send.fileno():
                pass        # replaced since; nothing of ours to take back
        except (ValueError, OSError):
            pass
        send.close()
        try:
            receive.shutdown(socket.SHUT_RDWR)    # wakes the watcher: it ends
        except OSError:
            pass
        if self._watcher is not None:
            self._watcher.join(timeout=1.0)
        receive.close()

    # ---- the program's view of signal.signal / getsignal -----------------------------

    def _signal(self, signalnum: Any, handler: Any) -> Any:
        assert self._wrapped is not None
        set_signal, _ = self._wrapped
        if signalnum not in self._previous \
                or threading.current_thread() is not threading.main_thread():
            return set_signal(signalnum, handler)
        previous = self._getsignal(signalnum)
        set_signal(signalnum, handler)      # raises as signal.signal would
        if handler is not signal.SIG_IGN:   # ignored, it stops nothing: no write
            set_signal(signalnum, self._handle)
        self._previous[signalnum] = handler
        return previous

    def _getsignal(self, signalnum: Any) -> Any:
        assert self._wrapped is not None
        _, get_signal = self._wrapped
        current = get_signal(signalnum)
        if current == self._handle and signalnum in self._previous:
            return self._previous[signalnum]
        return current

    # ---- writing -----------------------------------------------------------------
    #
    # Who writes a signal: the handler whenever the main thread runs it, else
    # the watcher.  The main thread may be interrupted while it holds a lock
    # the write takes (a profiler's, re-entrant): its own write goes through,
    # so the watcher must never block on one.  It takes the locks of
    # ``locks()`` only all at once, polling, and gives up the signal as soon
    # as the handler takes it; the handler waits only for a watcher write
    # that holds them all, which nothing of the main thread's holds up.  Which
    # signals are written is decided under ``_state``, the only place the
    # wakeup socket is read: a signal is still in the socket, pending (taken
    # out, not written), or written by the watcher and not yet seen by its
    # handler (``_unanswered``), so each is written once.  Not a snapshot
    # without the lock (the profiler's tables change under it), not a timed
    # wait (a write that timed out would still land later, a second time).

    def _watch(self, receive: socket.socket) -> None:
        while True:
            try:
                select.select([receive], [], [])
            except (OSError, ValueError):     # closed by uninstall
                return
            with self._state:
                if not self._take_signals():
                    return
                if self._pending is None:
                    continue
            self._write_when_free()

    def _take_signals(self) -> bool:
        """Under ``_state``: the signals waiting in the socket become pending
        (the main thread's frame read now); False once the socket is closed."""
        if self._sockets is None:
            return False
        receive = self._sockets[0]
        while True:
            try:
                data = receive.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            for signum in data:
                if signum in self._previous and self._pending is None:
                    main = threading.main_thread().ident
                    frame = sys._current_frames().get(main) if main is not None else None
                    self._pending = (signum, frame)

    def _write_when_free(self) -> None:
        """The watcher: write the pending signal once every lock of the write
        is free, unless the handler takes it first."""
        while True:
            held = _try_acquire(self._locks())
            if held is not None:
                break
            with self._state:
                if self._pending is None or self._sockets is None:   # taken; uninstalled
                    return
            time.sleep(LOCK_POLL_S)
        try:
            with self._state:
                if self._pending is None:
                    return
                signum, frame = self._pending
                self._pending = None
                self._idle.clear()
            try:
                self._write_reporting(signum, frame)
            finally:
                with self._state:
                    wrapped = self._wrapped
                    if wrapped is not None and wrapped[1](signum) == self._handle:
                        self._unanswered += 1      # its handler is still to run
                    self._idle.set()
        finally:
            for lock in reversed(held):
                lock.release()

    def _write_for_handler(self, signum: int, frame: Optional[types.FrameType]) -> None:
        """The handler: write, unless the watcher wrote this signal already."""
        deadline = time.monotonic() + WAIT_FOR_WATCHER_S
        while True:
            with self._state:
                if self._idle.is_set():
                    self._take_signals()
                    if self._pending is None and self._unanswered > 0:
                        self._unanswered -= 1
                        return
                    self._pending = None
                    break
            if not self._idle.wait(max(0.0, deadline - time.monotonic())):
                print(f"pytorch_memlab: {signal_name(signum)}: the profile is still being "
                      "written by another thread", file=sys.stderr)
                return
        self._write_reporting(signum, frame)

    def _write_reporting(self, signum: int, frame: Optional[types.FrameType]) -> None:
        try:
            self._write(signum, frame)
        except Exception as exc:   # never keep the signal from its effect
            print(f"pytorch_memlab: could not write the profile on "
                  f"{signal_name(signum)}: {exc!r}", file=sys.stderr)

    def _handle(self, signum: int, frame: Optional[types.FrameType]) -> Any:
        self._write_for_handler(signum, frame)
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous) or previous is signal.SIG_IGN:
            return previous(signum, frame) if callable(previous) else None
        # SIG_DFL, or a handler installed from C (None): the default, again
        self.uninstall()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None
