"""A profiled process stopped by SIGTERM or SIGINT still writes its profile.

``StopWriter(write).install()`` (main thread only) puts one handler on both
signals.  The profile is written by a watcher thread that the interpreter's
own C-level handler wakes through ``signal.set_wakeup_fd``: a main thread
stuck in a C call (a collective that never completes, which is where torchrun's
SIGTERM finds a surviving rank) never runs a Python handler, but the thread
does, and reads the main thread's stack from ``sys._current_frames``.  When the
main thread runs the Python handler, it waits briefly for that write (or
writes itself, if there is no watcher), then gives the signal its usual
effect: the handler installed before us is called; with none (``SIG_DFL``) the
default is restored and the signal raised again, so the process ends as it
would have (SIGTERM: killed by it).  ``write(signum, frame)`` receives the
main thread's frame, to mark the line that was running.

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
import signal
import socket
import sys
import threading
import types
from typing import Any, Callable, Optional

STOPPING = (signal.SIGTERM, signal.SIGINT)
WAIT_FOR_WATCHER_S = 5.0     # the main thread's wait for the watcher's write

Write = Callable[[int, Optional[types.FrameType]], None]


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopWriter:
    def __init__(self, write: Write) -> None:
        self._write = write
        self._previous: dict[int, Any] = {}     # the program's handler, per signal
        self._written = threading.Event()
        self._writing = threading.Lock()
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

    def _watch(self, receive: socket.socket) -> None:
        while True:
            try:
                data = receive.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in self._previous:
                    main = threading.main_thread().ident
                    frame = sys._current_frames().get(main) if main is not None else None
                    self._write_once(signum, frame)

    def _write_once(self, signum: int, frame: Optional[types.FrameType]) -> None:
        with self._writing:
            if self._written.is_set():
                return
            try:
                self._write(signum, frame)
            except Exception as exc:   # never keep the signal from its effect
                print(f"pytorch_memlab: could not write the profile on "
                      f"{signal_name(signum)}: {exc!r}", file=sys.stderr)
            finally:
                self._written.set()

    def _watched(self) -> bool:
        """Whether the watcher is woken by signals now (main thread only): the
        program (asyncio) may have set a wakeup fd of its own since."""
        if self._sockets is None or self._watcher is None or not self._watcher.is_alive():
            return False
        try:
            current = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(current, warn_on_full_buffer=False)
        except (ValueError, OSError):
            return False
        return current == self._sockets[1].fileno()

    def _handle(self, signum: int, frame: Optional[types.FrameType]) -> Any:
        if not self._watched() or not self._written.wait(WAIT_FOR_WATCHER_S):
            # No watcher, or it has not written: it may wait for a lock this
            # thread holds (the profiler's, re-entrant here): write from here.
            if self._writing.acquire(timeout=WAIT_FOR_WATCHER_S):
                self._writing.release()
            if not self._written.is_set():
                self._written.set()
                try:
                    self._write(signum, frame)
                except Exception as exc:
                    print(f"pytorch_memlab: could not write the profile on "
                          f"{signal_name(signum)}: {exc!r}", file=sys.stderr)
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous) or previous is signal.SIG_IGN:
            try:
                return previous(signum, frame) if callable(previous) else None
            finally:        # the program goes on: a later signal writes again
                self._written.clear()
        # SIG_DFL, or a handler installed from C (None): the default, again
        self.uninstall()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None
