"""The one CLI behind every entry point: ``--config``, ``--override a.b=value``, ``--dry-run``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None, algorithm: str | None = None, default_config: str | Path | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"Train a team with {algorithm or 'any algorithm'} (comlrl-c3).")
    parser.add_argument("--config", default=str(default_config) if default_config else None,
                        help="run config YAML" + (f" (default: {default_config})" if default_config else ""))
    parser.add_argument("--override", action="append", default=[], metavar="a.b=value",
                        help="override a config value (repeatable); true/false/none, Python literals, else strings")
    parser.add_argument("--dry-run", action="store_true", help="validate and report the budget without loading a model")
    args = parser.parse_args(argv)
    if not args.config:
        parser.error("--config is required")
    from .config import load_config
    from .run import dry_run_report, train, validate_or_exit

    cfg = validate_or_exit(lambda: load_config(args.config, args.override, default_algorithm=algorithm))
    if args.dry_run:
        report = validate_or_exit(lambda: dry_run_report(cfg))
        print(json.dumps(report, indent=2))
        return 0
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
