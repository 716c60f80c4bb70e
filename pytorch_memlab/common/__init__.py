"""What every tool of the package shares: how a byte count is written and read
(``sizes``), which device an argument names and the target GPU (``devices``),
how tensors are found and their storages told apart (``tensors``), and
how a file is replaced whole (``files``), and whether an output file can be
written (``paths``).

Nothing is imported here, so that ``sizes`` stays usable without torch (the
pytest plugin parses its markers before torch is imported).
"""
