"""The functions a profiler registered, with every code object each has had
(what a user passes becomes a function in ``common/callables.py``)."""
from __future__ import annotations

import types
from typing import Iterable, Iterator


class FunctionEntry:
    """A registered function and every code object it has had.

    Registered by code object alone (``LineProfiler.add_code``: the function
    does not exist yet, e.g. a script's function before the script runs),
    ``func`` is None and the entry has that one code object.
    """

    def __init__(self, func: types.FunctionType | None,
                 code: types.CodeType | None = None, qualname: str | None = None) -> None:
        self.func = func
        self._qualname = qualname
        first = func.__code__ if func is not None else code
        assert first is not None
        self.codes: list[types.CodeType] = [first]
        self.compiled = False   # registered through a torch.compile wrapper

    @property
    def qualname(self) -> str:
        if self.func is not None:
            return self.func.__qualname__
        return self._qualname or code_qualname(self.codes[0])

    @property
    def name(self) -> str:
        return self.func.__name__ if self.func is not None else self.codes[0].co_name

    @property
    def current_code(self) -> types.CodeType:
        return self.func.__code__ if self.func is not None else self.codes[0]

    def has_code(self, code: types.CodeType) -> bool:
        """Is ``code`` one of ours?  By identity (see ``CodesByIdentity``)."""
        return any(code is mine for mine in self.codes)

    def new_code(self) -> types.CodeType | None:
        """The function's code if it was replaced since the last look."""
        code = self.current_code
        if self.has_code(code):
            return None
        self.codes.append(code)
        return code


class CodesByIdentity:
    """A set of code objects that tests membership by identity.  Code objects
    compare equal when only their file differs (the same function in two
    files, two copies of a model's ``forward``), yet each is its own function."""

    def __init__(self, codes: Iterable[types.CodeType]) -> None:
        self._codes = {id(code): code for code in codes}   # holding them keeps ids valid

    def __contains__(self, code: object) -> bool:
        return id(code) in self._codes

    def __len__(self) -> int:
        return len(self._codes)

    def __iter__(self) -> Iterator[types.CodeType]:
        return iter(self._codes.values())


def code_qualname(code: types.CodeType) -> str:
    """``co_qualname`` (3.11+), else the bare name."""
    return getattr(code, "co_qualname", code.co_name)
