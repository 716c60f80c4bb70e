"""``python -m pytorch_memlab``: each verb is a ``Command`` (``command``),
listed in ``commands.COMMANDS``, from which the grammar (``parser``) and the
dispatch (``__main__``) are made; a verb's work lives in its own module
(``run``, ``view``, ``demo``, ``diff``), with the program ``run`` executes
(``program``), the functions it profiles (``register``, ``find_functions``)
and the ``-d`` it and ``demo`` take (``device_arg``).  Nothing here imports
torch."""
from .command import USAGE_ERROR, Command, CommandError
from .commands import COMMANDS
from .parser import build_parser, parse

__all__ = ["COMMANDS", "USAGE_ERROR", "Command", "CommandError", "build_parser", "parse"]
