"""Which module made each block: module numbers for the tracer, and their
names.  A module is named by its qualified name in the outermost module it
was first called under (``encoder.layers.3.mlp.fc1``), found once from that
module's ``named_modules()``; the outermost module itself by its class name,
which also leads the names of its children that are numbers
(``Sequential.2``); a module that is none of its outermost module's, after
the module that called it.  Two outermost modules alike (two copies of a
model) give their modules the same names: a record sums them by name.  A
wrapper that only hands its call to the model it wraps (DDP's ``module``,
DataParallel's, ``torch.compile``'s ``_orig_mod``) is outermost by its class
name alone, and the model it wraps is named as if it were outermost
(``Net``, ``fc1``, not ``module.fc1``): a profile reads the same with the
wrapper and without it.  Numbers are given once per process and never reused, so a record's figures
keep their names after the call."""
from __future__ import annotations

import threading
import weakref
from typing import Iterable, Optional

import torch

from .names import NO_MODULE


# wrappers by class name: the attribute that holds the model they wrap
WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module",
            "OptimizedModule": "_orig_mod"}

_lock = threading.Lock()
_names: list[str] = [NO_MODULE]  # by number
# modules charged with what their own modules made, which were not followed:
# a compiled module (they run inside the compiled code), a module that
# activation checkpointing recomputes in the backward pass
_stopped: set[int] = set()
_numbers: "weakref.WeakKeyDictionary[torch.nn.Module, int]" = weakref.WeakKeyDictionary()


def _add(module: torch.nn.Module, name: str) -> int:
    number = len(_names)
    _names.append(name)
    _numbers[module] = number
    return number


def _wrapped(module: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The model ``module`` wraps, if it is one of the WRAPPERS."""
    attr = WRAPPERS.get(type(module).__name__)
    inner = module._modules.get(attr) if attr is not None else None
    return inner if isinstance(inner, torch.nn.Module) else None


def _add_outermost(module: torch.nn.Module) -> int:
    """Numbers for an outermost module and its modules (_lock held)."""
    label = type(module).__name__
    number = _add(module, label)
    inner = _wrapped(module)
    if inner is not None:
        if inner not in _numbers:
            _add_outermost(inner)
        return number
    for path, child in module.named_modules():
        if path and child not in _numbers:
            # an nn.Sequential's children are numbers: named after it
            _add(child, f"{label}.{path}" if path[0].isdigit() else path)
    return number


def number_of(module: torch.nn.Module, caller: Optional[torch.nn.Module]) -> int:
    """The number of ``module``, called by ``caller`` (None: outermost)."""
    found = _numbers.get(module)
    if found is not None:
        return found
    with _lock:
        found = _numbers.get(module)
        if found is not None:
            return found
        if caller is None:
            return _add_outermost(module)
        base = _names[_numbers.get(caller, 0)]
        return _add(module, f"{base}.<{type(module).__name__}>")


def stop(number: int) -> None:
    """Module ``number`` is charged with what the modules it runs made."""
    _stopped.add(number)


def stopped_among(numbers: Iterable[int]) -> list[int]:
    """Those of ``numbers`` that ``stop`` was told of."""
    return [number for number in numbers if number in _stopped]


def name_of(number: int) -> str:
    return _names[number] if 0 <= number < len(_names) else NO_MODULE
