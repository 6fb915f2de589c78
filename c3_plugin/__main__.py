"""``python -m c3_plugin <command>``: the ``c3`` console script (see :func:`c3_plugin.cli.console`)."""

import sys

from .cli import console

sys.exit(console())
