"""Finding a function's code object by qualname before the function exists.

``python -m pytorch_memlab run -f train.py:Net.forward`` must profile
``Net.forward`` from its first call, without editing the script.  A function
object is made from a code object that the compiler stored among the
constants of the enclosing code (the module, a class body, an outer
function), so compiling the file ourselves gives us that code object before
any line runs; registering it with the tracer is enough, because
``MAKE_FUNCTION`` uses that very object.

- The main script, or the ``-m`` module: compiled here and executed from the
  code we compiled.
- Another module (``pkg.models:Net.forward`` or ``src/models.py:Net.forward``)
  that is not imported yet: an import hook (``ImportHook``, first on
  ``sys.meta_path``) lets the normal finders find it, then wraps the loader's
  ``get_code`` so that the code it returns is searched and registered before
  the module body runs.  Existence is checked up front by compiling the file.
- A module already imported (torch's, say): its functions exist, so their
  code objects are collected from the module's namespace.

What is run instead of the code found here, so that each function is
wrapped as it is created, is ``wrap_defs``'s business (``Registrar.adopt``).
"""
from __future__ import annotations

import difflib
import importlib.abc
import importlib.util
import inspect
import os
import sys
import types
from typing import Any, Callable, Iterator, Optional, Sequence

_FUNCTION_FLAGS = inspect.CO_OPTIMIZED | inspect.CO_NEWLOCALS


def is_function_code(code: types.CodeType) -> bool:
    """A ``def``/``async def`` body: not a module, class body, lambda or comprehension."""
    return (code.co_flags & _FUNCTION_FLAGS == _FUNCTION_FLAGS
            and not code.co_name.startswith("<"))


def iter_codes(code: types.CodeType, qualname: str = "") -> Iterator[tuple[str, types.CodeType]]:
    """(qualname, code) for every code object nested in ``code`` (not ``code``
    itself).  ``co_qualname`` where it exists (3.11+), else the compiler's rule
    rebuilt: ``Class.method``, ``outer.<locals>.inner``."""
    if not qualname:
        prefix = ""
    elif code.co_flags & inspect.CO_OPTIMIZED:
        prefix = qualname + ".<locals>."
    else:
        prefix = qualname + "."
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            name = getattr(const, "co_qualname", prefix + const.co_name)
            yield name, const
            yield from iter_codes(const, name)


def _loose(qualname: str) -> str:
    return qualname.replace("<locals>.", "")


def match(candidates: Sequence[tuple[str, types.CodeType]],
          qualname: str) -> list[tuple[str, types.CodeType]]:
    """Functions named ``qualname`` exactly, else with ``<locals>.`` left out
    (``outer.inner`` finds ``outer.<locals>.inner``).  All of them: a name
    defined twice (under ``if``/``else``) has two code objects."""
    functions = [(q, c) for q, c in candidates if is_function_code(c)]
    found = [(q, c) for q, c in functions if q == qualname]
    if not found:
        found = [(q, c) for q, c in functions if _loose(q) == _loose(qualname)]
    return found


def not_found(qualname: str, where: str, candidates: Sequence[tuple[str, types.CodeType]]) -> str:
    """The message for a qualname that is not there: what was looked up, and where."""
    names = list(dict.fromkeys(q for q, c in candidates if is_function_code(c)))
    message = f"no function {qualname!r} in {where}"
    close = difflib.get_close_matches(qualname, names, n=1) or difflib.get_close_matches(
        _loose(qualname), [_loose(n) for n in names], n=1)
    if close:
        message += f"; did you mean {close[0]!r}?"
    if names:
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        message += f"\n  functions there: {shown}"
    else:
        message += " (it defines no functions)"
    return message


# ---- modules already imported ----------------------------------------------------

def _members(obj: Any) -> Iterator[Any]:
    for value in vars(obj).values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            yield from (f for f in (value.fget, value.fset, value.fdel) if f is not None)
        else:
            yield value


def loaded_codes(module: types.ModuleType) -> list[tuple[str, types.CodeType]]:
    """(qualname, code) of the functions defined in an imported module (its
    classes' methods and the functions nested in them included)."""
    filename = getattr(module, "__file__", None)
    found: dict[types.CodeType, str] = {}
    seen: set[int] = set()

    def visit(obj: Any) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        try:
            func = inspect.unwrap(obj) if callable(obj) else obj
        except Exception:   # a __wrapped__ cycle, an object that refuses attributes
            return
        if isinstance(func, types.FunctionType):
            code = func.__code__
            if filename is None or code.co_filename == filename:
                found.setdefault(code, func.__qualname__)
                for name, inner in iter_codes(code, func.__qualname__):
                    found.setdefault(inner, name)
        elif isinstance(obj, type) and getattr(obj, "__module__", None) == module.__name__:
            for member in _members(obj):
                visit(member)

    for value in list(_members(module)):
        visit(value)
    return [(q, c) for c, q in found.items()]


def loaded_module_for(path: str) -> Optional[types.ModuleType]:
    """The imported module whose file is ``path``, if any."""
    real = os.path.realpath(path)
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None)
        if origin and os.path.realpath(origin) == real:
            return module
    return None


# ---- source files ----------------------------------------------------------------

def read_source(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def compile_file(path: str) -> types.CodeType:
    """Compile a source file as the interpreter would run it (no __future__
    flags inherited from this module)."""
    return compile(read_source(path), path, "exec", dont_inherit=True)


def loader_source(loader: Any, name: str) -> Optional[str]:
    """The source text of module ``name`` as its loader has it, if it has any."""
    get_source = getattr(loader, "get_source", None)
    try:
        source = get_source(name) if get_source is not None else None
    except (ImportError, OSError):
        return None
    return source if isinstance(source, str) else None


def module_source_code(name: str) -> tuple[types.CodeType, Any]:
    """(code, spec) of module ``name``, without running it (its parent
    packages are imported, as ``python -m`` does)."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    get_code = getattr(spec.loader, "get_code", None)
    code = get_code(name) if get_code is not None else None
    if code is None:
        raise ImportError(f"module {name!r} has no Python code to profile "
                          f"(loader {type(spec.loader).__name__})", name=name)
    return code, spec


# ---- the import hook -------------------------------------------------------------

# (the module's code, its source if known, the functions found in it by
# qualname) -> the code to run instead
Adopt = Callable[[types.CodeType, Optional[str], list[tuple[str, types.CodeType]]],
                 types.CodeType]


class ImportHook(importlib.abc.MetaPathFinder):
    """Hands the functions of modules to ``adopt`` as they are imported,
    before their body runs.  ``by_name`` / ``by_path``: module name or real
    file path -> qualnames."""

    def __init__(self, by_name: dict[str, list[str]], by_path: dict[str, list[str]],
                 adopt: Adopt, warn: Callable[[str], None]) -> None:
        self.by_name = by_name
        self.by_path = by_path
        self.adopt = adopt
        self.warn = warn
        self.done: set[str] = set()     # names / paths whose code was searched

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.by_name and not self.by_path:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None:
            return None
        keys = [fullname] if fullname in self.by_name else []
        if self.by_path and spec.origin and spec.has_location:
            real = os.path.realpath(spec.origin)
            keys += [real] if real in self.by_path else []
        keys = [key for key in keys if key not in self.done]
        if keys and hasattr(spec.loader, "get_code"):
            self._wrap(spec.loader, fullname, keys)
        return spec

    def _wrap(self, loader: Any, fullname: str, keys: list[str]) -> None:
        original = loader.get_code
        qualnames = [q for key in keys for q in self.by_name.get(key, self.by_path.get(key, []))]

        def get_code(name: str) -> Any:
            code = original(name)
            if name == fullname and code is not None and not self.done.issuperset(keys):
                self.done.update(keys)
                tree = list(iter_codes(code))
                found_all: list[tuple[str, types.CodeType]] = []
                for qualname in qualnames:
                    found = match(tree, qualname)
                    if not found:
                        self.warn(not_found(qualname, f"module {name} ({code.co_filename})",
                                            tree))
                    seen = {id(c) for _, c in found_all}
                    found_all += [(q, c) for q, c in found if id(c) not in seen]
                if found_all:
                    code = self.adopt(code, loader_source(loader, name), found_all)
            return code

        loader.get_code = get_code
