"""The record model (``model``), its JSON document (``document``), the files
it is saved to (``json_file``, ``csv_file``, ``saved``) and its DataFrame
(``frames``); ``select`` says which functions a ``func=`` names."""
