"""The program ``run`` executes: a script or ``-m`` module, read and compiled
before it starts, with its own ``sys.argv`` and ``sys.path[0]``."""
from __future__ import annotations

import builtins
import importlib.machinery
import os
import traceback
import types
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from . import find_functions as find
from .command import CommandError


# ---- the program to run ----------------------------------------------------------

@dataclass
class Program:
    """The script or ``-m`` module, compiled, with what it runs under."""
    code: types.CodeType
    argv: list[str]
    globals: dict[str, Any]
    path0: Optional[str]        # sys.path[0] while it runs (None: leave it)
    filename: str
    module: Optional[str]       # the -m name
    source: Optional[Union[str, bytes]] = None   # what ``code`` was compiled from

    @classmethod
    def script(cls, path: str, args: Sequence[str]) -> "Program":
        filename = os.path.abspath(path)
        try:
            source = find.read_source(filename)
            code = compile(source, filename, "exec", dont_inherit=True)
        except OSError as exc:
            raise CommandError(f"can't open file {path!r}: {exc.strerror or exc}") from None
        except (SyntaxError, ValueError) as exc:
            text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
            raise CommandError(text, 1) from None
        env = {"__name__": "__main__", "__file__": filename, "__builtins__": builtins,
               "__package__": None, "__spec__": None, "__cached__": None, "__doc__": None,
               "__loader__": importlib.machinery.SourceFileLoader("__main__", filename)}
        return cls(code, [path] + list(args), env, os.path.dirname(filename), filename, None,
                   source)

    @classmethod
    def module_main(cls, name: str, args: Sequence[str]) -> "Program":
        try:
            code, spec = find.module_source_code(name)
            if spec.submodule_search_locations is not None:     # a package: its __main__
                name = name + ".__main__"
                code, spec = find.module_source_code(name)
        except ImportError as exc:
            raise CommandError(f"-m {name}: {exc}") from None
        env = {"__name__": "__main__", "__file__": spec.origin, "__builtins__": builtins,
               "__package__": spec.parent, "__spec__": spec, "__loader__": spec.loader,
               "__cached__": spec.cached, "__doc__": None}
        return cls(code, [spec.origin or name] + list(args), env, None,
                   spec.origin or name, name, find.loader_source(spec.loader, name))
