"""The record model (``model``) and what is built on it alone, torch-free:
its JSON document (``document``), what a column measures (``meanings``) and
which columns a profile shows (``columns``), the files it is saved to
(``json_file``, ``csv_file``, ``saved``) and its DataFrame (``dataframe``);
which functions a ``func=`` names (``selection``), the memory curve of one
call (``curve``), a training run's steps folded into calls (``step_fold``),
a torchrun run's rank files (``ranks``) and two profiles compared
(``diff``).  Nothing here imports a report or a profiler."""
