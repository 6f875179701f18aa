"""``placement``: the entry point. Builds the parser from the commands' own modules, runs the one asked for, and
turns bad input into one line and exit 2.

Each subcommand lives in its own module of :mod:`placement.commands` (``add_arguments`` for its flags, a ``run_*``
function that calls the core and renders). Only the module of the command being run is imported, so
``placement --help`` and every command load only what they use; ``completion`` builds the whole parser.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from placement.console import EXIT_BAD_INPUT, EXIT_OK, paused_gc
from placement.errors import UsageError, shown

# name -> (module, its run function, the one-line help `placement --help` lists), in the order --help lists them.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("placement.commands.plan", "run_plan", "rank every cloud/region/zone/instance for one job"),
    "plan-batch": ("placement.commands.plan_batch", "run_plan_batch",
                   "place a burst of jobs jointly under shared quota (exact MILP)"),
    "offers": ("placement.commands.offers", "run_offers", "list catalog offers for an accelerator"),
    "refresh": ("placement.commands.refresh", "run_refresh",
                "write a new catalog file from live AWS/GCP data (to the user data directory)"),
    "submit": ("placement.commands.submit", "run_submit",
               "place a job on an existing cluster and hand it to that cluster's Kueue queue"),
    "portfolio": ("placement.commands.portfolio", "run_portfolio",
                  "choose the commitments a weekly demand forecast justifies (exact MILP)"),
    "completion": ("placement.commands.completion", "run_completion",
                   "print a shell completion script: eval \"$(placement completion bash)\""),
    "dispatch": ("placement.commands.dispatch", "run_dispatch",
                 "the MultiKueue External dispatcher: nominate the cheapest worker, counting the wait, for every "
                 "hub Workload"),
    "calibrate": ("placement.commands.calibrate", "run_calibrate",
                  "turn the fleet's measurements (Prometheus) into a calibration file"),
    "profile": ("placement.commands.profile", "run_profile",
                "benchmark the reference trainer here and record its per-GPU throughput as a calibration speed row"),
    "report": ("placement.commands.report", "run",
               "unit economics per team and workload class from the hub's Workloads and Prometheus: GPU-hours, "
               "utilisation, $ per run, planned vs measured"),
}


class _Parser(argparse.ArgumentParser):
    # Worked out only when the help is printed (e.g. a path that needs platformdirs), so --help stays fast.
    describe: Callable[[], str] | None = None

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")

    def format_help(self) -> str:
        if self.describe is not None:
            self.description = self.describe()
        return super().format_help()


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs: its first word that is not an option (None: ``--help``, ``--version``)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(only: str | None = None, alone: bool = False) -> argparse.ArgumentParser:
    """The ``placement`` parser. Every command is listed; the flags are added for ``only`` (importing its module),
    for none when ``only`` is ``""`` (``placement --help``), for every command when it is None (completion).
    ``alone``: only ``only`` is listed, for a command line that starts with it (the root parser's own help and
    choices are then never shown: its parser answers everything after the command's name)."""
    parser = _Parser(prog="placement", description="Rank where a GPU job can run now, with compute and egress "
                     "cost, across AWS and GCP. Exit codes: 0 placed, 1 nothing feasible, 2 bad input.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, _, help_text) in COMMANDS.items():
        if alone and name != only:
            continue  # a parser per command is ~1 ms a process, for lines no one sees
        p = sub.add_parser(name, help=help_text)
        if only is None or only == name:
            importlib.import_module(module).add_arguments(p)
    return parser


# Commands that answer once and exit: their objects live until the process ends, so no collector pass over them
# (plan-batch and dispatch run on, and collect).
ONE_SHOT = frozenset({"plan", "offers", "submit"})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (0 placed, 1 nothing feasible, 2 bad input). ``argv`` None: the process's
    own arguments (the ``placement`` command itself)."""
    process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    named = _command_named(argv)
    # From the parser on, not only around the command: building the parser and loading the model allocate enough
    # for a dozen collections, each walking every object made so far, to free nothing.
    with paused_gc() if named in ONE_SHOT else contextlib.nullcontext():
        code = _main(argv, named)
    if process and named in ONE_SHOT:
        # The process ends next: what is alive now is freed by the exit itself. Frozen, it is skipped by the
        # interpreter's collections at shutdown, which would otherwise walk all of it three times (~5 % of a plan).
        gc.freeze()
    return code


def _main(argv: list[str], named: str | None) -> int:
    from placement.errors import InputError

    parser = build_parser(only=named or "", alone=named is not None and argv[0] == named)  # "": no command's flags
    try:
        args = parser.parse_args(argv)
        if args.version:
            from placement import __version__

            print(f"placement (gpufleet) {__version__}")
            return EXIT_OK
        if not args.command:
            parser.print_help()
            return EXIT_BAD_INPUT
        if getattr(args, "refresh", False) and not getattr(args, "live", False):
            raise UsageError(f"placement {args.command}: --refresh only applies with --live (it skips the live "
                             "cache); add --live or drop --refresh (see --help)")
        if getattr(args, "allow_catalog_fallback", False) and not getattr(args, "live", False):
            raise UsageError(f"placement {args.command}: --allow-catalog-fallback only applies with --live; add "
                             "--live or drop it (see --help)")
        args.build_parser = build_parser  # completion writes every command's flags
        module, runner, _ = COMMANDS[args.command]
        command = getattr(importlib.import_module(module), runner)
        code = command(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not as a traceback at exit
        return code
    except (UsageError, InputError) as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): not an error of ours, and nothing to say.
        _drop_stdout()
        return EXIT_OK
    except OSError as exc:
        # Writing the output failed (a full disk: `> /dev/full`), or a path the checks above did not name.
        what = shown(str(exc.filename))[1:-1] if exc.filename else "cannot write the output"
        _error(f"{what}: {exc.strerror or exc}")
        _drop_stdout()
        return EXIT_BAD_INPUT


def _error(message: str) -> None:
    """The one line every failure ends with: credentials in any URL it holds cut (a URL the user typed as a
    path or a stray argument, or one a file named), so none reaches a terminal or a CI log."""
    from placement.errors import redact_url

    print(f"placement: error: {redact_url(message)}", file=sys.stderr)


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again at exit."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # no real file descriptor (tests' captured stdout)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
