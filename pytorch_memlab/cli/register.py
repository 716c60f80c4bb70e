"""``-f FUNC``: which functions ``run`` profiles, and registering their code
objects before the program starts (``find_functions`` finds them).

Each function is wrapped as it is created (``wrap_defs``), so that the
tracer is on only during its calls, as with ``@profile``.  One that cannot
be (a module imported before the program starts, a module without source,
an async generator) is registered alone, and the tracer is then on from
that moment to the end of the run, as the hook of every thread."""
from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union
from . import find_functions as find
from . import wrap_defs
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
        # (in the main program?, qualname, code) in -f order, registered at install
        self.early: list[tuple[bool, str, types.CodeType]] = []
        self.by_name: dict[str, list[str]] = {}
        self.by_path: dict[str, list[str]] = {}
        self.pending: list[FuncSpec] = []       # registered at import time
        self.hook: Optional[find.ImportHook] = None
        self.throughout = False     # some function is not wrapped: the tracer stays on
        self.installed = False

    def register(self, qualname: str, code: types.CodeType) -> None:
        self.profiler.add_code(code, qualname=qualname)

    def _always_on(self) -> None:
        if not self.throughout:
            self.throughout = True
            if self.installed:
                self.profiler.enable()

    def _wrapped(self, code: types.CodeType, source: Optional[Union[str, bytes]],
                 found: Sequence[tuple[str, types.CodeType]]
                 ) -> tuple[types.CodeType, dict[wrap_defs.Key, tuple[str, types.CodeType]]]:
        """The code to run for a module (or the program) of which ``found``
        are profiled, and by key what to register instead of each of them:
        compiled again from ``source`` with each wrapped as it is created;
        else ``code`` and ``found`` as they are, and the tracer on from now
        to the end of the run."""
        keys = {wrap_defs.key(c) for _, c in found}
        wrapped = None
        if source is not None and all(wrap_defs.can_wrap(c) for _, c in found):
            wrapped = wrap_defs.compile_wrapped(source, code.co_filename, keys)
        if wrapped is None:
            self._always_on()
            return code, {wrap_defs.key(c): (q, c) for q, c in found}
        new = {}
        for qualname, new_code in find.iter_codes(wrapped):
            if find.is_function_code(new_code) and wrap_defs.key(new_code) in keys:
                wrap_defs.add(new_code)
                new[wrap_defs.key(new_code)] = (qualname, new_code)
        return wrapped, new

    def adopt(self, code: types.CodeType, source: Optional[Union[str, bytes]],
              found: Sequence[tuple[str, types.CodeType]]) -> types.CodeType:
        """``_wrapped``, its functions registered (the import hook's ``adopt``)."""
        code, new = self._wrapped(code, source, found)
        for _, old in found:
            self.register(*new[wrap_defs.key(old)])
        return code

    def _find(self, spec: FuncSpec, tree: Sequence[tuple[str, types.CodeType]],
              where: str) -> list[tuple[str, types.CodeType]]:
        found = find.match(tree, spec.qualname)
        if not found:
            raise CommandError(f"-f {spec.raw}: " + find.not_found(spec.qualname, where, tree))
        return found

    def _add_main(self, found: Sequence[tuple[str, types.CodeType]]) -> None:
        seen = {id(c) for _, _, c in self.early}
        self.early += [(True, q, c) for q, c in found if id(c) not in seen]

    def _add_loaded(self, spec: FuncSpec, module: types.ModuleType, where: str) -> None:
        """Its functions exist already: registered as they are, tracer on throughout."""
        self.early += [(False, q, c) for q, c in self._find(spec, find.loaded_codes(module),
                                                            where)]
        self._always_on()

    def _is_main(self, spec: FuncSpec) -> bool:
        if spec.kind == "main":
            return True
        if spec.kind == "path":
            return os.path.realpath(spec.where or "") == os.path.realpath(self.program.filename)
        return spec.where == self.program.module

    def add(self, spec: FuncSpec) -> None:
        if self._is_main(spec):
            self._add_main(self._find(spec, self.main_tree, self.program.filename))
        elif spec.kind == "path":
            self._add_path(spec)
        else:
            self._add_module(spec)

    def add_all_main(self) -> bool:
        """Every function the program defines; False if it defines none."""
        found = [(q, c) for q, c in self.main_tree if find.is_function_code(c)]
        self._add_main(found)
        return bool(found)

    def _add_path(self, spec: FuncSpec) -> None:
        assert spec.where is not None
        loaded = find.loaded_module_for(spec.where)
        if loaded is not None:
            self._add_loaded(spec, loaded, spec.where)
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
        self._add_loaded(spec, module,
                         f"module {name} ({getattr(module, '__file__', 'built-in')})")

    def install(self) -> None:
        """Just before the program starts: its code, imports and the tracer
        made ready (the tracer switched on now only when it stays on)."""
        main = [(q, c) for in_main, q, c in self.early if in_main]
        new: dict[wrap_defs.Key, tuple[str, types.CodeType]] = {}
        if main:
            self.program.code, new = self._wrapped(self.program.code, self.program.source,
                                                   main)
        for in_main, qualname, code in self.early:
            self.register(*(new[wrap_defs.key(code)] if in_main else (qualname, code)))
        wrap_defs.activate(self.profiler)
        if self.by_name or self.by_path:
            self.hook = find.ImportHook(self.by_name, self.by_path, self.adopt,
                                        lambda text: print(f"pytorch_memlab run: {text}",
                                                           file=sys.stderr))
            self.hook.install()
        self.installed = True
        if self.throughout:
            self.profiler.enable()

    def uninstall(self) -> None:
        wrap_defs.deactivate()
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
