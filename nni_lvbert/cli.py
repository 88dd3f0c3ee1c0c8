"""`lvbert` console script.

Each pipeline stage lives in its own module exposing `register(subparsers)`; the module adds its subcommand
and sets `func` on the parser. Modules are imported lazily by name so `lvbert --help` stays fast and a stage
that needs heavy imports (NNI, Lightning) only pays for them when it runs.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import interrupt, threads
from .argcheck import Parser, check_values, command_words, parse_args, with_config
from .errors import UserError
from .nni_compat import ignore_nni_import_warnings
from .options import option_meta
from .ranks import launcher_is_rank_zero

# (subcommand, module that registers it) in pipeline order.
COMMANDS = [
    ("info", "nni_lvbert.info"),
    ("data", "nni_lvbert.data.cli"),
    ("supernet", "nni_lvbert.supernet.cli"),
    ("search", "nni_lvbert.search.cli"),
    ("iot", "nni_lvbert.iot.cli"),
    ("export", "nni_lvbert.export"),
    ("pretrain", "nni_lvbert.pretrain.cli"),
    ("finetune", "nni_lvbert.finetune.cli"),  # registers finetune and glue
    ("study", "nni_lvbert.study.cli"),
    ("run", "nni_lvbert.pipeline"),
    ("init-experiment", "nni_lvbert.init_experiment"),
]


STACK_DUMP_ENV = "LVBERT_STACK_DUMP_AFTER"  # seconds: print every thread's stack to stderr that often


def arm_stack_dumps(file=None) -> float | None:
    """With $LVBERT_STACK_DUMP_AFTER=S, every S seconds print each thread's Python stack to stderr (or `file`):
    where a run that prints nothing is waiting (`benchmarks/gpu_smoke.py` sets it). Returns S, or None when unset."""
    import faulthandler

    value = os.environ.get(STACK_DUMP_ENV)
    if not value:
        return None
    try:
        seconds = float(value)
        if seconds <= 0:
            raise ValueError
    except ValueError:
        raise UserError(f"${STACK_DUMP_ENV} must be a positive number of seconds, got {value!r}") from None
    faulthandler.dump_traceback_later(seconds, repeat=True, file=file or sys.stderr)
    return seconds


def quiet_known_warnings() -> None:
    ignore_nni_import_warnings()  # NNI 3.0's harmless "... is found to be not a nn.Module" (see nni_compat)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def computes(args) -> bool:
    """A command that computes with torch: its options take --threads (`threads.HELP`)."""
    cls = getattr(args, "options_cls", None)
    return cls is not None and option_meta(cls, "threads") is not None


def package_version() -> str:
    """The installed distribution's version (importlib.metadata; no torch), else the package's __version__."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nni-lvbert")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="lvbert",
        description="LV-BERT layer-variety architecture search on Microsoft NNI. "
                    "Pipeline: data prepare -> supernet train -> search run -> best_arch.json (lvbert run does all).",
    )
    parser.add_argument("--version", action="version", version=f"lvbert {package_version()}",
                        help="print the installed nni-lvbert version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def continue_command(parser: argparse.ArgumentParser, argv: list[str], args) -> str:
    """The command that continues an interrupted one: its subcommand words with `--out OUT --resume` once OUT holds
    stored options (a resumed run needs no other flag), else the command as typed (nothing was written yet)."""
    import shlex
    from pathlib import Path

    out = getattr(args, "out", None)
    if not out or not hasattr(args, "resume") or not (Path(out) / "options.json").is_file():
        return shlex.join(["lvbert", *argv])
    return shlex.join(["lvbert", *command_words(parser, argv), "--out", str(out), "--resume"])


def main(argv: list[str] | None = None) -> int:
    quiet_known_warnings()
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser, argv)  # args.given: what was typed; a mistake: one line and a did-you-mean
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if computes(args):  # before torch is imported: OMP_WAIT_POLICY beside another lvbert (threads.py)
        threads.quiet_spinning()
    armed = None
    interrupt.install()
    try:
        armed = arm_stack_dumps()
        args = with_config(parser, args, argv)  # --config values under the typed flags, for every command
        if getattr(args, "print_config", False):  # the options as a --config file, nothing run
            from .cliargs import config_yaml

            print(config_yaml(args.options_cls, args))
            return 0
        check_values(args)  # --space/--size/--arch typos: one line before a command's torch/NNI imports
        result = args.func(args)
        if isinstance(result, dict):  # a command's result (cliargs.print_result; empty on DDP ranks > 0)
            if result:
                from .cliargs import print_result

                print_result(result, getattr(args, "json", False))
            result = 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, interrupt.Interrupted) as exc:
        if launcher_is_rank_zero():  # DDP ranks > 0 stop silently with rank 0
            at = exc.at if isinstance(exc, interrupt.Interrupted) else interrupt.where()
            print(f"interrupted{f' at {at}' if at else ''}; continue with: {continue_command(parser, argv, args)}",
                  file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lvbert ... | head`: the reader left; no traceback (Python's documented recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        threads.release()
        if armed:
            import faulthandler

            faulthandler.cancel_dump_traceback_later()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
