"""``-f FUNC``: which functions ``run`` profiles, and registering their code
objects before the program starts (``find_functions`` finds them)."""
from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Optional, Sequence
from . import find_functions as find
from .command import CommandError
from .program import Program


@dataclass
class FuncSpec:
    """One ``-f``: a qualname in the main program, a file or a module."""
    raw: str
    kind: str                   # "main", "path" or "module"
    where: Optional[str]        # absolute path or module name
    qualname: str


def parse_func(raw: str) -> FuncSpec:
    where, sep, qualname = raw.rpartition(":")
    if not sep:
        return FuncSpec(raw, "main", None, raw)
    if not where or not qualname or qualname.startswith("\\"):
        raise CommandError(f"-f {raw!r}: expected QUALNAME, path.py:QUALNAME or module:QUALNAME")
    if where.endswith((".py", ".pyw")) or "/" in where or os.sep in where:
        return FuncSpec(raw, "path", os.path.abspath(where), qualname)
    return FuncSpec(raw, "module", where, qualname)



# ---- registering the functions ---------------------------------------------------

class Registrar:
    """Resolves every ``-f`` to code objects and registers them, now or at import."""

    def __init__(self, profiler: Any, program: Program) -> None:
        self.profiler = profiler
        self.program = program
        self.main_tree = list(find.iter_codes(program.code))
        self.by_name: dict[str, list[str]] = {}
        self.by_path: dict[str, list[str]] = {}
        self.pending: list[FuncSpec] = []       # registered at import time
        self.hook: Optional[find.ImportHook] = None

    def register(self, qualname: str, code: types.CodeType) -> None:
        self.profiler.add_code(code, qualname=qualname)

    def _register_found(self, spec: FuncSpec, tree: Sequence[tuple[str, types.CodeType]],
                        where: str) -> None:
        found = find.match(tree, spec.qualname)
        if not found:
            raise CommandError(f"-f {spec.raw}: " + find.not_found(spec.qualname, where, tree))
        for qualname, code in found:
            self.register(qualname, code)

    def _is_main(self, spec: FuncSpec) -> bool:
        if spec.kind == "main":
            return True
        if spec.kind == "path":
            return os.path.realpath(spec.where or "") == os.path.realpath(self.program.filename)
        return spec.where == self.program.module

    def add(self, spec: FuncSpec) -> None:
        if self._is_main(spec):
            self._register_found(spec, self.main_tree, self.program.filename)
        elif spec.kind == "path":
            self._add_path(spec)
        else:
            self._add_module(spec)

    def add_all_main(self) -> None:
        for qualname, code in self.main_tree:
            if find.is_function_code(code):
                self.register(qualname, code)

    def _add_path(self, spec: FuncSpec) -> None:
        assert spec.where is not None
        loaded = find.loaded_module_for(spec.where)
        if loaded is not None:
            self._register_found(spec, find.loaded_codes(loaded), spec.where)
            return
        try:
            tree = list(find.iter_codes(find.compile_file(spec.where)))
        except OSError as exc:
            raise CommandError(f"-f {spec.raw}: can't open file {spec.where!r}: "
                           f"{exc.strerror or exc}") from None
        except (SyntaxError, ValueError) as exc:
            raise CommandError(f"-f {spec.raw}: {spec.where} does not compile: {exc}") from None
        if not find.match(tree, spec.qualname):
            raise CommandError(f"-f {spec.raw}: " + find.not_found(spec.qualname, spec.where,
                                                                    tree))
        self.by_path.setdefault(os.path.realpath(spec.where), []).append(spec.qualname)
        self.pending.append(spec)

    def _add_module(self, spec: FuncSpec) -> None:
        name = spec.where
        assert name is not None
        if name not in sys.modules:
            try:
                code, _ = find.module_source_code(name)   # may import its parents
            except ImportError as exc:
                raise CommandError(f"-f {spec.raw}: {exc}") from None
            if name not in sys.modules:
                tree = list(find.iter_codes(code))
                if not find.match(tree, spec.qualname):
                    raise CommandError(f"-f {spec.raw}: " + find.not_found(
                        spec.qualname, f"module {name} ({code.co_filename})", tree))
                self.by_name.setdefault(name, []).append(spec.qualname)
                self.pending.append(spec)
                return
        module = sys.modules[name]
        self._register_found(spec, find.loaded_codes(module),
                             f"module {name} ({getattr(module, '__file__', 'built-in')})")

    def install(self) -> None:
        if self.by_name or self.by_path:
            self.hook = find.ImportHook(self.by_name, self.by_path, self.register,
                                             lambda text: print(f"pytorch_memlab run: {text}",
                                                                file=sys.stderr))
            self.hook.install()

    def uninstall(self) -> None:
        if self.hook is not None:
            self.hook.uninstall()

    def never_imported(self) -> list[str]:
        done = self.hook.done if self.hook is not None else set()
        missing = []
        for spec in self.pending:
            key = spec.where if spec.kind == "module" else os.path.realpath(spec.where or "")
            if key not in done:
                missing.append(spec.raw)
        return missing
