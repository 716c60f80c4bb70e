"""``python -m pytorch_memlab``: one module per verb (``run``, ``view``,
``info``, ``demo``), the program ``run`` executes (``program``), the functions
it profiles (``register``, ``find_functions``) and the grammar (``parser``).
``demo`` and ``info`` import torch, so they are not imported here."""
from .parser import add_run_parser, add_view_parser, build_parser, parse_run
from .run import run_command
from .view import view_command

__all__ = ["add_run_parser", "add_view_parser", "build_parser", "parse_run", "run_command",
           "view_command"]
