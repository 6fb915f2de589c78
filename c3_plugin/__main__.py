"""``python -m c3_plugin <command>``: the ``c3`` console script (see :func:`c3_plugin.tools.cli.console`)."""

import sys

from c3_plugin.tools.cli import console

sys.exit(console())
