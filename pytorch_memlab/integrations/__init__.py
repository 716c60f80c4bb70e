"""pytorch_memlab inside other tools: the IPython magics (``magics.py``),
Lightning's and Hugging Face's trainers (``lightning.py``,
``transformers.py``, over what they share, ``step_profiler.py``) and pytest
(``pytest_plugin/``).  Nothing in the package below imports these; each
imports its tool only when it is itself imported.  The public paths stay
``pytorch_memlab.lightning``, ``pytorch_memlab.transformers`` and
``pytorch_memlab.pytest_plugin`` (the modules of those names re-export)."""
