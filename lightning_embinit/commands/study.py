"""``embinit sweep`` (run a study's trials) and ``embinit report`` (its tables and figures); docs/cli_reference.md.

``sweep`` exits 0 when every trial of the variant is done, 1 when some failed (each is recorded with its
error), 2 when the study cannot start (the error names the key, the file or the missing install), 130 when
interrupted; ``report`` exits 0, or 2 when the results cannot be read or the report not written. Either
prints one line on failure (``embinit sweep: error: ...``).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from pathlib import Path

ENGINES = ("local", "ray")


def sweep_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embinit sweep",
        allow_abbrev=False,
        description="Run a study's trials (setting × seed); finished trials in the results directory are skipped.",
    )
    parser.add_argument("study", help="the study's YAML file (examples/studies/*.yaml)")
    parser.add_argument("--variant", default=None, help="smoke, medium, full, ... (default: the study as written)")
    parser.add_argument("--results", default=None, help="results directory (default: runs/<study>-<variant>)")
    parser.add_argument("--workers", type=int, default=1, help="trials at a time (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="threads per trial (default: cores // workers)")
    parser.add_argument("--retry-failed", action="store_true", help="rerun trials whose record says failed")
    parser.add_argument("--engine", choices=ENGINES, default="local", help="local processes (default) or Ray Tune")
    parser.add_argument("--ray-address", default=None, help="an existing Ray cluster (default: a local instance)")
    parser.add_argument("--gpus-per-trial", type=int, default=0, help="Ray engine: GPUs per trial (default 0)")
    parser.add_argument(
        "--ddp-workers",
        type=int,
        default=1,
        help="Ray engine: run each trial as a DDP run of this many Ray Train workers, each with "
        "--threads CPUs and --gpus-per-trial GPUs (per worker; default 1: one process per trial)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser


def _fail(command: str, message: str) -> int:
    print(f"embinit {command}: error: {message}", file=sys.stderr)
    return 2


def sweep_main(argv: Sequence[str] | None = None) -> int:
    """``embinit sweep``: 0 when every trial is done, 1 when some failed, 2 when the study cannot start."""
    args = sweep_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.engine == "local":
        from lightning_embinit.studies.local import start_trial_server

        start_trial_server()  # imports the package in the trials' server while this process checks the study
    from lightning_embinit.studies.keys import StudyError
    from lightning_embinit.studies.spec import Study

    try:
        if args.ddp_workers != 1 and args.engine != "ray":
            raise StudyError(
                f"--ddp-workers {args.ddp_workers} needs --engine ray (Ray Train runs each trial on "
                "several workers); locally, give the study trainer.devices and trainer.strategy: ddp"
            )
        options = ["variant", "workers", "threads", "retry_failed", "progress"]
        if args.engine == "ray":
            from lightning_embinit.studies.ray_engine import run_study_on_ray
            from lightning_embinit.studies.ray_train import require_ray

            require_ray()  # before the study is read: the missing install is the first thing to fix
            runner = functools.partial(run_study_on_ray, address=args.ray_address)
            options += ["gpus_per_trial", "ddp_workers"]
        else:
            from lightning_embinit.studies.local import run_study as runner
        study = Study.from_yaml(args.study)
        results = Path(args.results or f"runs/{study.name}" + (f"-{args.variant}" if args.variant else ""))
        records = runner(study, results, **{option: getattr(args, option) for option in options})
    except (StudyError, ImportError, OSError) as error:  # a study or results directory that cannot be read or written
        return _fail("sweep", str(error))
    except KeyboardInterrupt:
        print("embinit sweep: interrupted; finished trials are recorded, the same command resumes", file=sys.stderr)
        return 130
    return 0 if records and all(record.get("status") == "done" for record in records) else 1


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embinit report",
        allow_abbrev=False,
        description="Tables (Markdown, CSV) and figures of a "
        "sweep's results: mean ± std per setting, differences from the reference.",
    )
    parser.add_argument("results", help="a results directory written by embinit sweep")
    parser.add_argument("--out", default=None, help="where the report goes (default: <results>/report)")
    parser.add_argument("--reference", default=None, help="the setting differences are measured against")
    parser.add_argument("--metrics", default=None, help="comma-separated metrics (default: every metric)")
    return parser


def report_main(argv: Sequence[str] | None = None) -> int:
    """``embinit report``: prints the Markdown summary and where the files went; 2 on an unreadable directory."""
    args = report_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from lightning_embinit.studies.keys import StudyError
    from lightning_embinit.studies.report import write_report

    metrics = [name.strip() for name in args.metrics.split(",") if name.strip()] if args.metrics else None
    try:
        report = write_report(args.results, args.out, reference=args.reference, metrics=metrics)
    except (StudyError, OSError) as error:
        return _fail("report", str(error))
    print(report["markdown"])
    print(f"report written to {report['out_dir']}", file=sys.stderr)
    return 0
