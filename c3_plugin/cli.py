"""The one CLI behind every entry point: ``--config``, ``--override a.b=value``, ``--dry-run``; and the ``c3``
console script (``c3 train``, ``c3 dry-run``, ``c3 compare``; also ``python -m c3_plugin``)."""

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


def console(argv: list[str] | None = None) -> int:
    """``c3 <command>``: train, dry-run or compare."""
    parser = argparse.ArgumentParser(prog="c3", description="comlrl-c3: train LLM teams with C3, MAGRPO, MAPPO and compare them.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", required=True, help="run config YAML (configs/<domain>/<algorithm>.yaml)")
        p.add_argument("--override", action="append", default=[], metavar="a.b=value",
                       help="override a config value (repeatable); true/false/none, Python literals, else strings")

    common(sub.add_parser("train", help="train one run (the algorithm named in the config); torchrun for several processes"))
    common(sub.add_parser("dry-run", help="check the config, data, budget, memory and cluster plan without loading a model"))
    cmp = sub.add_parser("compare", help="run every (algorithm, seed) from one config and compare them with statistics")
    common(cmp)
    cmp.add_argument("--algorithms", nargs="+", required=True, help="algorithms to compare, e.g. c3 magrpo mappo")
    cmp.add_argument("--seeds", nargs="+", type=int, required=True, help="seeds, the same for every algorithm (paired)")
    cmp.add_argument("--out", default=None, help="comparison folder (default runs/<config name>); its name is the W&B group")
    cmp.add_argument("--launcher", default=None, help="command that launches each run, e.g. 'torchrun --nproc_per_node 8'")
    cmp.add_argument("--metric", action="append", default=None, metavar="GLOB",
                     help="final eval metrics compared (repeatable glob; default eval/*/accuracy, else eval/reward_mean)")
    cmp.add_argument("--aggregate-only", action="store_true", help="aggregate the finished runs without starting any")
    dash = sub.add_parser("dashboard", help="an HTML page for a comparison or run folder, or a W&B workspace for a comparison")
    dash.add_argument("folder", nargs="?", help="a c3 compare folder or a run folder: writes <folder>/dashboard.html")
    dash.add_argument("--out", default=None, help="where the HTML page goes (default <folder>/dashboard.html)")
    dash.add_argument("--wandb", default=None, metavar="ENTITY/PROJECT", help="build the W&B workspace of a comparison instead")
    dash.add_argument("--group", default=None, help="the comparison's W&B group (its folder's name)")
    dash.add_argument("--metric", action="append", default=None, help="eval metrics of the W&B workspace (default eval/reward_mean)")
    dash.add_argument("--algorithms", nargs="+", default=["c3", "magrpo", "mappo"], help="the compared algorithms (W&B job types)")
    dash.add_argument("--online", action="store_true", help="save the workspace to W&B (else write its specification to --out)")
    args = parser.parse_args(argv)
    if args.command == "dashboard":
        return dashboard(args, parser)
    if args.command in ("train", "dry-run"):
        return main(["--config", args.config, *sum((["--override", o] for o in args.override), []),
                     *(["--dry-run"] if args.command == "dry-run" else [])])
    from .compare import compare
    from .run import validate_or_exit

    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem
    validate_or_exit(lambda: compare(args.config, args.algorithms, args.seeds, out, args.override, args.launcher,
                                     args.metric or ("eval/*/accuracy",), run=not args.aggregate_only))
    return 0


def dashboard(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.wandb:
        if not args.group or "/" not in args.wandb:
            parser.error("--wandb ENTITY/PROJECT needs --group NAME (the comparison folder's name)")
        from .dashboard_wandb import publish, workspace_spec

        entity, project = args.wandb.split("/", 1)
        spec = workspace_spec(entity, project, args.group, args.metric or ["eval/reward_mean"], args.algorithms)
        print(publish(spec, online=args.online, out_path=Path(args.out or f"{args.group}.workspace.json")))
        return 0
    if not args.folder:
        parser.error("give a comparison or run folder, or --wandb ENTITY/PROJECT --group NAME")
    from .dashboard import write_dashboard

    print(write_dashboard(args.folder, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
