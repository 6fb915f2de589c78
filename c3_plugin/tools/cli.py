"""The one CLI behind every entry point: ``--config``, ``--override a.b=value``, ``--dry-run``; and the ``c3``
console script (``c3 train``, ``c3 dry-run``, ``c3 compare``, ``c3 dashboard``, ``c3 diagnose``, ``c3 plan-budget``,
``c3 advise``, ``c3 audit``; also ``python -m c3_plugin``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.errors import DomainHookError, RewardValueError, RunInterrupted
from c3_plugin.core.registry import workflow_algorithms
from c3_plugin.core.workflow import WorkflowError

# The subcommands' own modules are imported where a subcommand runs: they load torch, transformers, CoMLRL or SciPy
# (seconds), which `c3 --help` and a mistyped argument never need.


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default: argparse's ``(default: value)``, except for a required option and an
    option whose help already says what its default is (a default computed from other options)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if action.required or "default" in text else super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An argument parser with :class:`DefaultsHelpFormatter`; its subcommands' parsers are ones too."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)


def main(argv: list[str] | None = None, algorithm: str | None = None, default_config: str | Path | None = None) -> int:
    parser = Parser(description=f"Train a team with {algorithm or 'any algorithm'} (comlrl-c3).")
    parser.add_argument("--config", default=str(default_config) if default_config else None,
                        help="run config YAML" + (f" (default: {default_config})" if default_config else ""))
    parser.add_argument("--override", action="append", default=[], metavar="a.b=value",
                        help="override a config value (repeatable); true/false/none, Python literals, YAML "
                             "({A: 4}), else strings")
    parser.add_argument("--dry-run", action="store_true", help="validate and report the budget without loading a model")
    parser.add_argument("--json", action="store_true",
                        help="--dry-run: print the whole report as JSON instead of its summary; an "
                             "error as one JSON line")
    parser.add_argument("--report", default=None, metavar="FILE",
                        help="--dry-run: also write the whole report as JSON to FILE")
    parser.add_argument("--debug", action="store_true",
                        help="show an error's traceback instead of its one line (also: C3_DEBUG=1)")
    args = parser.parse_args(argv)
    if not args.config:
        parser.error("--config is required")
    from c3_plugin.run.dry_run import dry_run_report, summary, unmapped_lines
    from c3_plugin.run.train import validate_or_exit

    cfg = validate_or_exit(lambda: load_config(args.config, args.override, default_algorithm=algorithm,
                                               hub_preflight=True),
                           args.json)
    if args.dry_run:
        report = validate_or_exit(lambda: dry_run_report(cfg), args.json)
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2) if args.json else summary(report, args.report))
        return 2 if report["status"] == "error" else 0
    if cfg.layout == "llm_collab":
        print("\n".join(f"note: {line}" for line in unmapped_lines(cfg)))
    return train_or_exit(cfg, args.json, args.debug or bool(os.environ.get("C3_DEBUG")))


def train_or_exit(cfg: Any, as_json: bool, debug: bool) -> int:
    """Train; the failures a user meets are one line with the next step (``--debug`` or ``C3_DEBUG=1``: the
    traceback): Ctrl-C (the env step and how to resume), an output folder that cannot be written, a domain hook that
    raised, and a failure before training started (bad model, data, ...)."""
    from c3_plugin.run.folder import write_failure
    from c3_plugin.run.train import train, validate_or_exit

    try:
        train(cfg)
    except KeyboardInterrupt as exc:
        if debug:
            raise
        print(f"interrupted: {exc}" if isinstance(exc, RunInterrupted) else
              "interrupted before training started: nothing was trained; the same command starts again")
        return 130
    except (DomainHookError, RewardValueError, OSError) as exc:
        line = write_failure(exc, cfg) if isinstance(exc, OSError) else str(exc)
        if debug or line is None:
            raise
        print(json.dumps({"status": "error", "error": line}) if as_json else f"error: {line}")
        return 2
    except Exception as exc:  # failed before training started (bad model, data, ...): one line, like a config error
        if (debug or not getattr(exc, "before_training", False)
                or not isinstance(exc, (ConfigError, WorkflowError, ValueError, FileNotFoundError))):
            # a failure during training, or another kind of error (a bug: KeyError, TypeError, ...), keeps its traceback
            raise

        failure = exc  # the except clause unbinds exc when it ends

        def again() -> None:
            raise failure

        validate_or_exit(again, as_json)
        raise
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    """The options every run command takes: the config and its overrides."""
    p.add_argument("--config", required=True, help="run config YAML (configs/<domain>/<algorithm>.yaml)")
    p.add_argument("--override", action="append", default=[], metavar="a.b=value",
                   help="override a config value (repeatable); true/false/none, Python literals, YAML "
                        "({A: 4}), else strings")


def _add_run_commands(sub: Any) -> None:
    """``c3 train`` and ``c3 dry-run``."""
    trn = (sub.add_parser("train", help="train one run (the algorithm named in the config); torchrun "
                                        "for several processes"))
    _common(trn)
    trn.add_argument("--json", action="store_true", help="print an error as one JSON line instead of text")
    trn.add_argument("--debug", action="store_true",
                     help="show an error's traceback instead of its one line (also: C3_DEBUG=1)")
    dry = (sub.add_parser("dry-run", help="check the config, data, budget, memory and cluster plan "
                                          "without loading a model"))
    _common(dry)
    dry.add_argument("--json", action="store_true", help="print the whole report as JSON instead of its summary")
    dry.add_argument("--report", default=None, metavar="FILE", help="also write the whole report as JSON to FILE")


def _add_compare(sub: Any) -> None:
    """``c3 compare``."""
    cmp = sub.add_parser("compare", help="run every (algorithm, seed) from one config and compare them with statistics")
    _common(cmp)
    cmp.add_argument("--algorithms", nargs="+", required=True, help="algorithms to compare, e.g. c3 magrpo mappo")
    cmp.add_argument("--seeds", nargs="+", type=int, required=True, help="seeds, the same for every algorithm (paired)")
    cmp.add_argument("--out", default=None,
                     help="comparison folder (default runs/<config name>); its name is the W&B group")
    cmp.add_argument("--launcher", default=None,
                     help="command that launches each run, e.g. 'torchrun --nproc_per_node 8'")
    cmp.add_argument("--metric", action="append", default=None, metavar="GLOB",
                     help="final eval metrics compared (repeatable glob; default eval/*/accuracy, "
                          "else eval/reward_mean)")
    cmp.add_argument("--aggregate-only", action="store_true", help="aggregate the finished runs without starting any")
    cmp.add_argument("--json", action="store_true", help="print an error as one JSON line instead of text")
    cmp.add_argument("--allow-differences", nargs="*", default=None, metavar="KEY",
                     help="compare although settings other than the credit differ: the named keys (e.g. "
                          "agent_learning_rate), or every difference when given alone; the consent "
                          "goes into summary.json")


def _add_dashboard(sub: Any) -> None:
    """``c3 dashboard``."""
    dash = (sub.add_parser("dashboard", help="an HTML page for a comparison or run folder, or a W&B "
                                             "workspace for a comparison"))
    dash.add_argument("folder", nargs="?",
                      help="a c3 compare folder (results table over seeds) or a run folder (its final "
                           "metrics and before/after table): writes <folder>/dashboard.html")
    dash.add_argument("--out", default=None, help="where the HTML page goes (default <folder>/dashboard.html)")
    dash.add_argument("--wandb", default=None, metavar="ENTITY/PROJECT",
                      help="build the W&B workspace of a comparison instead")
    dash.add_argument("--group", default=None, help="the comparison's W&B group (its folder's name)")
    dash.add_argument("--metric", action="append", default=None,
                      help="eval metrics of the W&B workspace (default eval/reward_mean)")
    dash.add_argument("--algorithms", nargs="+", default=None,
                      help="the compared algorithms (W&B job types; default: the registry's workflow trainers)")
    dash.add_argument("--online", action="store_true",
                      help="save the workspace to W&B (else write its specification to --out)")


def _add_diagnose(sub: Any) -> None:
    """``c3 diagnose``."""
    diag = (sub.add_parser("diagnose", help="reliability, noise law and influence at every decision "
                                            "point, without training"))
    diag.add_argument("--config", default=None, help="run config YAML (or --run: a trained run's own config)")
    diag.add_argument("--override", action="append", default=[], metavar="a.b=value",
                      help="override a config value (repeatable)")
    diag.add_argument("--run", default=None,
                      help="a run folder: its config.json, and --checkpoint final loads its trained models")
    diag.add_argument("--checkpoint", default="base",
                      help="base (the config's model), final (<run>/final), latest or checkpoint-N "
                      "(<run>/checkpoints/), or a folder of agent_<i>/ models or a checkpoint")
    diag.add_argument("--groups", type=int, default=60, help="contexts (groups) per decision point")
    diag.add_argument("--n", type=int, default=4, help="alternatives per group (>= 3: split-half ranks them)")
    diag.add_argument("--c", type=int, default=4,
                      help="continuations per alternative (even; 1 is used at the last decision point)")
    diag.add_argument("--decisions", default="all", help="'all' or comma-separated decision indices, e.g. 0,2")
    diag.add_argument("--chunk", type=int, default=8,
                      help="groups per generation batch; each finished chunk is saved (resumable)")
    diag.add_argument("--seed", type=int, default=0,
                      help="seeds every chunk (a resumed diagnosis gives the same numbers)")
    diag.add_argument("--out", default=None,
                      help="output folder (default <run>/diagnose or runs/diagnose/<config name>); rerun to resume")
    diag.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_plan_and_advise(sub: Any) -> None:
    """``c3 plan-budget`` and ``c3 advise``."""
    plan = sub.add_parser("plan-budget",
                          help="the (n, c) split of B reward calls per decision point that maximises reliability")
    plan.add_argument("--from", dest="source", required=True, help="a diagnose.json written by c3 diagnose")
    plan.add_argument("--budget", type=int, required=True,
                      help="reward calls B per decision point (and leaves of the tree plans)")
    plan.add_argument("--out", default=None, help="also write the result as JSON here")
    adv = (sub.add_parser("advise", help="which algorithm and plan: predicted gradient SNR per decision point of "
                                         "every plan of B leaves"))
    adv.add_argument("--from", dest="source", required=True,
                     help="a diagnose.json written by c3 diagnose (--decisions all)")
    adv.add_argument("--budget", type=int, required=True,
                     help="reward calls B per instance and update (leaves of every plan)")
    adv.add_argument("--lr-scale", type=float, nargs="+", default=None,
                     help="per decision point multiplier of the step size (0: frozen, no vote); default 1 each")
    adv.add_argument("--outcome-variance", type=float, default=None,
                     help="variance of the reward of one complete path (default: the diagnosis' own; else unknown: "
                          "every plan is scored at O = 0, 1/4, 1/2, 3/4 and all of the last point's reward variance, "
                          "and a plan is named only when it wins at each)")
    adv.add_argument("--benched", default=None,
                     help="the plan the team runs now, kept unless another beats it clearly (default: the most even "
                          "tree of B leaves, e.g. 'tree [2, 4]')")
    adv.add_argument("--out", default=None,
                     help="where the advice JSON goes (default advice.json beside diagnose.json)")


def _add_audit(sub: Any) -> None:
    """``c3 audit``."""
    aud = sub.add_parser("audit", help="credit every message of recorded runs by re-entering their decision points")
    aud.add_argument("--run", required=True, help="a run folder with traces.jsonl (trained with save_traces: true)")
    aud.add_argument("--override", action="append", default=[], metavar="a.b=value",
                     help="override a value of the run's config (repeatable)")
    who = aud.add_mutually_exclusive_group()
    who.add_argument("--instance", default=None, help="audit this instance id's lowest-reward run in its latest batch")
    who.add_argument("--failed", type=int, default=None,
                     help="audit the N instances with the lowest-reward runs (default 3)")
    aud.add_argument("--checkpoint", default=None,
                     help="final (default when <run>/final exists, else latest when it kept checkpoints, else base), "
                          "latest or checkpoint-N (<run>/checkpoints/), or a folder of agent_<i>/ "
                          "models or a checkpoint")
    aud.add_argument("--n", type=int, default=4, help="fresh alternatives per decision point (the baseline V)")
    aud.add_argument("--c", type=int, default=4, help="continuations per alternative and of the recorded message (Q)")
    aud.add_argument("--seed", type=int, default=0, help="sampling seed")
    aud.add_argument("--out", default=None, help="output folder (default <run>/audit): audit.json and audit.png")
    aud.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The ``c3`` parser: one subcommand per tool."""
    parser = Parser(prog="c3", description="comlrl-c3: train LLM teams with C3, MAGRPO, MAPPO and compare them.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for add in (_add_run_commands, _add_compare, _add_dashboard, _add_diagnose, _add_plan_and_advise, _add_audit):
        add(sub)
    return parser


def console(argv: list[str] | None = None) -> int:
    """``c3 <command>``: train, dry-run, compare, dashboard, diagnose, plan-budget, advise or audit."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "dashboard":
        return dashboard(args, parser)
    if args.command in ("diagnose", "plan-budget", "advise", "audit"):
        from c3_plugin.run.train import validate_or_exit

        return validate_or_exit(lambda: analysis_command(args, parser))
    if args.command in ("train", "dry-run"):
        return main(["--config", args.config, *sum((["--override", o] for o in args.override), []),
                     *(["--dry-run"] if args.command == "dry-run" else []),
                     *(["--json"] if getattr(args, "json", False) else []),
                     *(["--debug"] if getattr(args, "debug", False) else []),
                     *(["--report", args.report] if getattr(args, "report", None) else [])])
    from c3_plugin.run.train import validate_or_exit
    from c3_plugin.tools.compare import compare

    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem
    allow = True if args.allow_differences == [] else args.allow_differences  # bare flag: every difference
    validate_or_exit(lambda: compare(args.config, args.algorithms, args.seeds, out, args.override, args.launcher,
                                     args.metric or ("eval/*/accuracy",), run=not args.aggregate_only,
                                     allow_differences=allow),
                     args.json)
    return 0


def analysis_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``c3 diagnose``, ``c3 plan-budget``, ``c3 advise`` and ``c3 audit`` (:mod:`c3_plugin.tools.diagnose`,
    :mod:`~c3_plugin.tools.plan_budget`,
    :mod:`~c3_plugin.tools.advise`, :mod:`~c3_plugin.tools.audit`)."""
    if args.command == "plan-budget":
        from c3_plugin.tools.plan_budget import plan_budget, print_plan

        source = Path(args.source)
        if not source.exists():
            raise FileNotFoundError(f"--from {source}: no such file; run c3 diagnose first (it writes "
                                    "<out>/diagnose.json)")
        result = plan_budget(json.loads(source.read_text()), args.budget)
        print_plan(result)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2))
        return 0
    if args.command == "advise":
        from c3_plugin.tools.advise import advise, print_advice

        source = Path(args.source)
        if not source.exists():
            raise FileNotFoundError(f"--from {source}: no such file; run c3 diagnose first (it writes "
                                    "<out>/diagnose.json)")
        result = advise(json.loads(source.read_text()), args.budget, args.lr_scale, args.outcome_variance,
                        args.benched)
        print_advice(result)
        out = Path(args.out) if args.out else source.with_name("advice.json")
        out.write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
        return 0
    from c3_plugin.tools.session import open_session, run_config, weights_folder

    if args.command == "audit":
        from c3_plugin.tools.audit import audit_run, print_audit, trace_files

        trace_files(args.run)  # before loading any model: a run without traces fails at once
        checkpoint = args.checkpoint or ("final" if (Path(args.run) / "final" / "agent_0").is_dir()
                                         else "latest" if any((Path(args.run) / "checkpoints").glob("checkpoint-*"))
                                         else "base")
        session = open_session(run_config(args.run, args.override), weights_folder(args.run, checkpoint))
        report = audit_run(session, args.run, args.out or Path(args.run) / "audit", args.instance,
                           args.failed if args.failed is not None or args.instance else 3, args.n, args.c, args.seed,
                           progress=not args.quiet)
        print_audit(report)
        print(f"policies: {checkpoint}; wrote "
              f"{Path(args.out or Path(args.run) / 'audit') / 'audit.json'} and audit.png")
        return 0
    from c3_plugin.tools.diagnose import diagnose, print_report

    if bool(args.config) == bool(args.run):
        parser.error("c3 diagnose needs exactly one of --config and --run")
    cfg = run_config(args.run, args.override) if args.run else load_config(args.config, args.override)
    out = Path(args.out) if args.out else (Path(args.run) / "diagnose" if args.run
                                           else Path("runs") / "diagnose" / Path(args.config).stem)
    weights = weights_folder(args.run, args.checkpoint)
    session = open_session(cfg, weights)
    print_report(diagnose(session, out, args.groups, args.n, args.c, args.decisions, args.chunk, args.seed,
                          progress=not args.quiet, weights=str(weights or "base")))
    print(f"wrote {out / 'diagnose.json'} and {out / 'reliability_by_depth.png'}")
    return 0


def dashboard(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.wandb:
        if not args.group or "/" not in args.wandb:
            parser.error("--wandb ENTITY/PROJECT needs --group NAME (the comparison folder's name)")
        from c3_plugin.tools.dashboard_wandb import publish, workspace_spec

        entity, project = args.wandb.split("/", 1)
        spec = workspace_spec(entity, project, args.group, args.metric or ["eval/reward_mean"],
                              args.algorithms or workflow_algorithms())
        from c3_plugin.run.train import validate_or_exit

        print(validate_or_exit(lambda: publish(spec, online=args.online,
                                               out_path=Path(args.out or f"{args.group}.workspace.json"))))
        return 0
    if not args.folder:
        parser.error("give a comparison or run folder, or --wandb ENTITY/PROJECT --group NAME")
    from c3_plugin.tools.dashboard import write_dashboard

    print(write_dashboard(args.folder, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
