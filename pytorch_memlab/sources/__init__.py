"""Memory sources: what the C tracer reads for each kind of device.

``native.py`` is the one boundary to the compiled modules (it loads them
and wraps their calls, deciding nothing); ``choice.py`` is the policy, which
source serves a profiler, said as one ``SourceChoice``; ``cuda_fallback.py``
is the slow CUDA source used without the shim; ``info.py`` is
``pytorch_memlab.info()``, the choice as the user reads it.  A source's
interface is typed in ``_tracer.pyi`` (``Source``).
"""
from .choice import (REQUIRE_SHIM_ENV, SourceChoice, accept, choose, field_meaning, field_table,
                     get_source, prepare, settle_blocks, source_fields)

__all__ = ["REQUIRE_SHIM_ENV", "SourceChoice", "accept", "choose", "field_meaning", "field_table",
           "get_source", "prepare", "settle_blocks", "source_fields"]
