"""``python -m pytorch_memlab``: each verb is a ``Command`` (``command``),
listed in ``commands.COMMANDS``, from which the grammar (``parser``) and the
dispatch (``__main__``) are made; each verb's ``Command`` and work live in
its own module (``run``, ``view``, ``demo``, ``diff``, ``info``), with the
program ``run`` executes (``program``), the functions it profiles
(``register``, ``find_functions``), the ``-d`` it and ``demo`` take
(``device_arg``) and the step ``demo`` profiles (``demo_step``).  Importing
this package imports no torch: a verb's heavy imports wait until it runs."""
from .command import USAGE_ERROR, Command, CommandError
from .commands import COMMANDS
from .parser import build_parser, parse

__all__ = ["COMMANDS", "USAGE_ERROR", "Command", "CommandError", "build_parser", "parse"]
