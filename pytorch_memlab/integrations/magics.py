"""IPython magics: ``%mlrun`` (a statement) and ``%%mlrun`` (a cell) run code
under a fresh LineProfiler and show the table of the functions named with -f.

This is the only module that imports IPython; ``%load_ext pytorch_memlab``
imports it through ``pytorch_memlab.load_ipython_extension``.

Each run builds its own profiler from its options and disables it before the
magic returns, so nothing carries over to later cells: not the device chosen
with -g (the process-wide target GPU is never touched), not the columns, not
a trace hook.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Union

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..common.devices import parse_device
from ..common.paths import cannot_write
from ..line_profiler import DEFAULT_COLUMNS, LineProfiler

if TYPE_CHECKING:
    import argparse
    import types

    from IPython.core.interactiveshell import InteractiveShell

# Options, as the line scanner must know them to tell where the statement of
# the line magic begins: short letters and long names that take a value, and
# those that do not.  The argparse declarations below are the other half.
_VALUE_SHORT = frozenset("fcgT")
_FLAG_SHORT = frozenset("Drqu")
_VALUE_LONG = ("--function", "--column", "--gpu", "--dump-profile")
_FLAG_LONG = ("--no_default_columns", "--no-default-columns", "--return-profiler", "--quiet",
              "--by-call", "--hide-unrun", "--hide_unrun")


def _word(text: str, pos: int) -> tuple[str, int]:
    """The word starting at ``text[pos]`` and the index after it.  A word that
    starts with a quote runs to the matching quote, which is removed
    (-T "my profile.txt", -f "nets['big one'].forward"); anywhere else quotes
    are part of the word (-f nets['a'].forward), and there are no backslash
    escapes (Windows paths pass as they are)."""
    quote = text[pos]
    if quote in "'\"":
        close = text.find(quote, pos + 1)
        if close < 0:
            raise UsageError(f"%mlrun: unterminated {quote} in {text[pos:]!r}")
        return text[pos + 1:close], close + 1
    end = pos
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[pos:end], end


def _takes_value(option: str) -> bool:
    """Does ``option`` (a word that starts with '-') need the next word as its
    value?  Long names may be abbreviated, as argparse allows."""
    if option.startswith("--"):
        if "=" in option:
            return False
        matches = [name for name in _VALUE_LONG + _FLAG_LONG if name.startswith(option)]
        return bool(matches) and all(name in _VALUE_LONG for name in matches)
    for i, letter in enumerate(option[1:], start=1):
        if letter in _VALUE_SHORT:
            return i == len(option) - 1          # else the value is attached: -fNet.forward
        if letter not in _FLAG_SHORT:
            return False                         # argparse reports it
    return False


def _is_option(word: str) -> bool:
    """'-x...' and '--name...' are options; '-1', '-(x)' and '-' start a statement."""
    return len(word) > 1 and word[0] == "-" and (word[1].isalpha() or
                                                 (word[1] == "-" and len(word) > 2))


def split_line(line: str) -> tuple[list[str], str]:
    """(option words, statement): the options come first; the statement is the
    rest of the line, verbatim (its quotes and spacing kept).  A bare ``--``
    ends the options explicitly."""
    argv: list[str] = []
    pos = 0
    expect_value = False
    while True:
        while pos < len(line) and line[pos].isspace():
            pos += 1
        if pos == len(line):
            return argv, ""
        if expect_value:
            word, end = _word(line, pos)
            argv.append(word)
            expect_value = False
        else:
            end = pos
            while end < len(line) and not line[end].isspace():
                end += 1
            word = line[pos:end]
            if word == "--":
                return argv, line[end:].strip()
            if not _is_option(word):
                return argv, line[pos:].strip()
            argv.append(word)
            expect_value = _takes_value(word)
        pos = end


GPU_ACCEPTED = "a GPU index N, 'cuda', 'cuda:N', 'cpu' or 'all'"


def _gpu(spec: Optional[str]) -> Union[None, int, str]:
    """-g's value for LineProfiler(device=...): an index or the string as
    given; UsageError for a spelling that names no CPU or CUDA device."""
    if spec is None:
        return None
    spec = spec.strip()
    if spec == "all":
        return spec
    value = int(spec) if spec.isdigit() else spec
    try:
        device = parse_device(value, "-g", GPU_ACCEPTED)
    except (TypeError, ValueError):
        device = None       # torch's reason lists every device type it knows: not ours
    if device is None or device.type not in ("cpu", "cuda"):
        raise UsageError(f"%mlrun: -g {spec!r}: expected {GPU_ACCEPTED}")
    return value


@magics_class
class MemlabMagics(Magics):
    """%mlrun / %%mlrun."""

    # Optional in Magics; register_magics, which builds this class, passes it.
    shell: InteractiveShell

    @magic_arguments()
    @argument("-f", "--function", metavar="FUNC", action="append", default=[],
              help="An expression, evaluated in the user namespace, that gives a function "
                   "or method to profile (e.g. -f train_step, -f Net.forward, -f model: "
                   "its forward). Repeat for more functions; at least one is needed.")
    @argument("-c", "--column", metavar="COLUMN", action="append", default=[],
              help="Also record this field (a key of torch.cuda.memory_stats(), e.g. "
                   "active_bytes.all.allocated; on CPU active_bytes.all.*, "
                   "reserved_bytes.all.*, allocation.all.*). Repeatable. An unknown "
                   "name is an error that lists the valid ones.")
    @argument("-D", "--no_default_columns", "--no-default-columns", action="store_true",
              help="Leave out the default columns (" + ", ".join(DEFAULT_COLUMNS) + "): "
                   "record only those given with -c.")
    @argument("-r", "--return-profiler", action="store_true",
              help="Return the LineProfiler (for .stats(), .display(), .print_stats()).")
    @argument("-g", "--gpu", metavar="DEVICE", default=None,
              help="What to profile, for this run only: a GPU index (0, 1, ...), "
                   "'cuda:N', 'cpu' (CPU tensor memory) or 'all' (every visible GPU). "
                   "Default: the target GPU (set_target_gpu, else the current CUDA "
                   "device); without CUDA, CPU tensor memory.")
    @argument("-q", "--quiet", action="store_true",
              help="Do not show the table (use with -r or -T).")
    @argument("-T", "--dump-profile", metavar="FILE", default=None,
              help="Also write the text table to FILE (overwritten).")
    @argument("--by-call", action="store_true",
              help="Show the first call's figures and the later calls' side by side.")
    @argument("-u", "--hide-unrun", "--hide_unrun", action="store_true",
              help="Leave out the lines that never ran.")
    @argument("statement", nargs="*",
              help="The code to run (line magic). In the cell magic the cell is the code.")
    @no_var_expand          # the statement is Python: {x} and $x stay as written
    @line_cell_magic
    def mlrun(self, line: str = "", cell: Optional[str] = None) -> Optional[LineProfiler]:
        """Run code under pytorch_memlab's line profiler and show, for every line
        of the functions named with -f, the peak memory while it ran, how much
        it left behind and how often it ran.

        Line magic: the statement follows the options (or a bare --)::

          %mlrun -f train_step train_step(model, batch)

        Cell magic: the whole cell runs under the profiler::

          %%mlrun -f Net.forward -f train_step -c active_bytes.all.allocated
          for batch in loader:
              train_step(model, batch)

        The code runs in the user namespace (IPython syntax such as %magics
        works in the cell); the value of a last expression is not shown. The
        line is not expanded: {x} and $x stay Python. Each run uses a fresh
        profiler: its device and columns apply to that run only, and -g never
        moves the target GPU. The table is displayed (HTML in a notebook, text
        in a terminal) unless -q. If the code raises, the table (lines the
        exception passed through are marked) is shown and written to the -T
        file, then the exception propagates. Option values with spaces go in
        quotes: -T "my profile.txt", -f "nets['a b'].forward".
        """
        argv, statement = split_line(line)
        args = self.mlrun.parser.parse_args(argv)   # UsageError on a bad option
        if cell is None:
            if not statement:
                raise UsageError("%mlrun: nothing to run; usage: %mlrun -f FUNC STATEMENT")
            source = statement
        else:
            if statement:
                raise UsageError(f"%%mlrun: put the code in the cell, not on the magic's "
                                 f"line ({statement!r})")
            source = cell
        if args.dump_profile is not None and cannot_write(os.path.expanduser(args.dump_profile)):
            raise UsageError(f"%mlrun: -T {args.dump_profile}: cannot write there (no such "
                             "folder, or no permission)")
        profiler = self._profiler(args)
        code = self._compile(source)
        try:
            with profiler:
                exec(code, self.shell.user_global_ns, self.shell.user_ns)
        except BaseException:
            self._report(profiler, args)
            raise
        self._report(profiler, args)
        return profiler if args.return_profiler else None

    # ---- helpers -----------------------------------------------------------------

    def _profiler(self, args: argparse.Namespace) -> LineProfiler:
        """A fresh profiler from the options; UsageError names what is wrong."""
        if not args.function:
            raise UsageError("%mlrun: nothing to profile; name a function with "
                             "-f FUNC (e.g. -f train_step or -f Net.forward)")
        if args.no_default_columns and not args.column:
            raise UsageError("%mlrun: -D leaves out the default columns; "
                             "name the ones to record with -c COLUMN")
        columns = list(args.column) if args.no_default_columns \
            else list(DEFAULT_COLUMNS) + list(args.column)
        functions = [self._function(expr) for expr in args.function]
        try:
            profiler = LineProfiler(device=_gpu(args.gpu), columns=columns)
        except (ValueError, TypeError) as err:
            raise UsageError(f"%mlrun: {err}") from None
        for expr, func in zip(args.function, functions):
            try:
                profiler.add_function(func)
            except TypeError as err:
                raise UsageError(f"%mlrun: -f {expr}: {err}") from None
        return profiler

    def _function(self, expr: str) -> Any:
        try:
            return eval(expr, self.shell.user_global_ns, self.shell.user_ns)
        except Exception as err:
            raise UsageError(f"%mlrun: -f {expr}: cannot find it in the user namespace "
                             f"({type(err).__name__}: {err})") from None

    def _compile(self, source: str) -> types.CodeType:
        """IPython syntax (magics, !commands) made Python, with its source kept
        in linecache so tracebacks show it."""
        python: str = self.shell.transform_cell(source)  # type: ignore[no-untyped-call]  # IPython: unannotated
        filename = self.shell.compile.cache(python, self.shell.execution_count)
        return self.shell.compile(python, filename, "exec")

    @staticmethod
    def _report(profiler: LineProfiler, args: argparse.Namespace) -> None:
        if not args.quiet:
            display(profiler.display(by_call=args.by_call, hide_unrun=args.hide_unrun))
        if args.dump_profile is not None:
            path = os.path.expanduser(args.dump_profile)
            with open(path, "w", encoding="utf-8") as stream:
                profiler.print_stats(stream=stream, by_call=args.by_call,
                                     hide_unrun=args.hide_unrun)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext pytorch_memlab``: register %mlrun / %%mlrun."""
    ipython.register_magics(MemlabMagics)
