"""``python -m pytorch_memlab``: each verb is a ``Command`` (``command``),
listed in ``commands.COMMANDS``, from which the grammar (``parser``) and the
dispatch (``__main__``) are made; a verb's work lives in its own module
(``run``, ``view``, ``demo``), with the program ``run`` executes
(``program``) and the functions it profiles (``register``,
``find_functions``).  Nothing here imports torch."""
from .command import USAGE_ERROR, Command, CommandError
from .commands import COMMANDS
from .parser import build_parser, parse

__all__ = ["COMMANDS", "USAGE_ERROR", "Command", "CommandError", "build_parser", "parse"]
