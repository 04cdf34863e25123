"""``embinit transplant``: a trained model with a new tokenizer, written as a new model (docs/transplant.md).

``--model`` is a ``save_pretrained`` directory (the output is one too, the new tokenizer beside the weights) or a
checkpoint of the package's systems (the output is a checkpoint that ``load_from_checkpoint`` reads, its tokenizer
inside). The rows come from :func:`~lightning_embinit.init.transplant.transplant_tokenizer`. Every argument is checked
before anything is loaded: a refusal is one line on stderr and exit status 2; a failure of the run itself, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_embinit.checks import environment_flag
from lightning_embinit.commands.arguments import CommandParser

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
)
"""The files that make a directory a Hugging Face tokenizer's."""
NEEDS = {"omp": "donor", "neighbors": "donor", "focus": "texts", "description": "descriptions"}
"""The option each method cannot work without."""


def _parser() -> CommandParser:
    parser = CommandParser(
        prog="embinit transplant",
        description="Give a trained model a new tokenizer: matched tokens keep their rows, the method builds the rest.",
    )
    parser.add_argument("--model", required=True, help="a save_pretrained directory, or a checkpoint (.ckpt)")
    parser.add_argument("--tokenizer", required=True, help="the new tokenizer: a Hugging Face tokenizer directory")
    parser.add_argument("--output", required=True, help="the new model: a directory (a checkpoint file for a .ckpt)")
    parser.add_argument(
        "--method",
        default="pieces",
        help="pieces (default), mean, focus, neighbors[:k], omp[:k], description, token:<old token>",
    )
    parser.add_argument("--fallback", default="mean", help="for the tokens the method cannot build (default mean)")
    parser.add_argument(
        "--old-tokenizer",
        help="the model's own tokenizer (default: the one beside it); for a checkpoint also a saved .json or hf:<name>",
    )
    parser.add_argument("--donor", help="neighbors, omp: a model directory that speaks the new tokenizer")
    parser.add_argument("--texts", help="focus: a text file of the new domain, one line per text")
    parser.add_argument("--descriptions", help="description: a file of token<TAB>text lines")
    parser.add_argument(
        "--match", default="special,exact,normalized", help="the match kinds to try, in order (also: case)"
    )
    parser.add_argument(
        "--standardize", action="store_true", help="move the built rows onto the old rows' mean and std"
    )
    parser.add_argument(
        "--bias", default="combine", help="new bias entries: combine (default), mean, min, zero, a number"
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of fastText (focus)")
    parser.add_argument("--overwrite", action="store_true", help="replace an output that exists")
    return parser


def _refuse(message: str) -> int:
    print(f"embinit transplant: error: {message}", file=sys.stderr)
    return 2


def _check_output(args: argparse.Namespace, checkpoint: bool) -> str | None:
    """Why ``--output`` is refused, or None."""
    model, output = Path(args.model).resolve(), Path(args.output).resolve()
    if output == model:
        return f"--output {args.output} is --model: write the new model elsewhere (the trained one stays as it is)"
    if output.exists() and not args.overwrite:
        if output.is_file() or any(output.iterdir()):
            return f"--output {args.output} exists and is not empty: name a new path, or pass --overwrite"
    if checkpoint and output.is_dir():
        return f"--output {args.output} is a directory; a checkpoint --model writes a checkpoint file (new.ckpt)"
    if not output.parent.is_dir():
        return f"--output {args.output}: its folder {output.parent} does not exist"
    return None


PATHS = ("model", "tokenizer", "output", "old_tokenizer", "donor", "texts", "descriptions")
"""The options that name files or directories (``~`` expanded once, before anything reads them)."""


def _expand(args: argparse.Namespace) -> None:
    for option in PATHS:
        value = getattr(args, option)
        if value is not None and not value.startswith("hf:"):
            setattr(args, option, os.path.expanduser(value))


def _check_old_tokenizer(value: str, checkpoint: bool) -> str | None:
    """Why ``--old-tokenizer`` is refused, or None: a directory, or for a checkpoint what ``build_tokenizer`` reads
    (a directory, a saved tokenizer ``.json``, ``hf:<name>``)."""
    path = Path(value)
    if path.is_dir() or (checkpoint and (value.startswith("hf:") or (path.is_file() and path.suffix == ".json"))):
        return None
    if not checkpoint:
        return f"--old-tokenizer {value}: no such directory"
    return f"--old-tokenizer {value}: neither a tokenizer directory nor a saved tokenizer .json (nor hf:<name>)"


def _check(args: argparse.Namespace) -> str | None:
    """Why the arguments are refused (one line), or None; nothing is loaded."""
    from lightning_embinit.init.transplant import MATCH_KINDS, resolve_method

    model = Path(args.model)
    if not model.exists():
        return f"--model {args.model}: no such file or directory"
    checkpoint = model.is_file()
    if not checkpoint and not (model / "config.json").is_file():
        return f"--model {args.model} is a directory without config.json: give a save_pretrained directory or a .ckpt"
    if not checkpoint and args.old_tokenizer is None and not any((model / name).is_file() for name in TOKENIZER_FILES):
        return f"--model {args.model} has no tokenizer beside its weights: pass --old-tokenizer DIR (its own)"
    for option in ("tokenizer", "donor"):
        value = getattr(args, option)
        if value is not None and not Path(value).is_dir():
            return f"--{option} {value}: no such directory"
    if args.old_tokenizer is not None and (problem := _check_old_tokenizer(args.old_tokenizer, checkpoint)):
        return problem
    for option in ("texts", "descriptions"):
        value = getattr(args, option)
        if value is not None and not Path(value).is_file():
            return f"--{option} {value}: no such file"
    try:
        for spec in (args.method, args.fallback):
            resolve_method(spec)
    except ValueError as error:
        return str(error)
    kinds = [kind.strip() for kind in args.match.split(",") if kind.strip()]
    if unknown := [kind for kind in kinds if kind not in MATCH_KINDS]:
        return f"--match {args.match}: unknown kinds {unknown}; choose among {', '.join(MATCH_KINDS)}"
    for option, spec in (("method", args.method), ("fallback", args.fallback)):
        needed = NEEDS.get(spec.partition(":")[0])
        if needed and getattr(args, needed) is None:
            return f"--{option} {spec} needs --{needed} (docs/transplant.md, 'Methods')"
    if args.bias not in ("combine", "mean", "min", "zero"):
        try:
            float(args.bias)
        except ValueError:
            return f"--bias {args.bias}: choose combine, mean, min, zero or a number"
    return _check_output(args, checkpoint)


def _descriptions(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    found = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if line.strip():
            token, tab, text = line.partition("\t")
            if not tab or not text.strip():
                raise ValueError(f"--descriptions {path}, line {number}: expected token<TAB>text, got {line[:60]!r}")
            found[token] = text.strip()
    return found


def _options(args: argparse.Namespace) -> dict[str, Any]:
    texts = None
    if args.texts is not None:
        texts = [line for line in Path(args.texts).read_text(encoding="utf-8").split("\n") if line.strip()]
    bias: Any = args.bias if args.bias in ("combine", "mean", "min", "zero") else float(args.bias)
    return {
        "method": args.method,
        "fallback": args.fallback,
        "match": tuple(kind.strip() for kind in args.match.split(",") if kind.strip()),
        "donor": None if args.donor is None else f"hf:{args.donor}",
        "texts": texts,
        "descriptions": _descriptions(args.descriptions),
        "standardize": True if args.standardize else None,
        "bias": bias,
        "seed": args.seed,
    }


def _pretrained(args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """A ``save_pretrained`` directory in, one out, the new tokenizer beside the weights."""
    import transformers
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from lightning_embinit.init.transplant import transplant_tokenizer

    config = AutoConfig.from_pretrained(args.model)
    names = [name for name in (config.architectures or []) if hasattr(transformers, name)]
    model_class = getattr(transformers, names[0]) if names else AutoModel
    model = model_class.from_pretrained(args.model)
    new = AutoTokenizer.from_pretrained(args.tokenizer)
    old = AutoTokenizer.from_pretrained(args.old_tokenizer or args.model)
    report = transplant_tokenizer(model, new, old_tokenizer=old, **options)
    model.save_pretrained(args.output)
    new.save_pretrained(args.output)
    return report


def _checkpoint(args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of the package's systems in, one out (hyperparameters, state and the ``embinit`` record)."""
    import torch

    from lightning_embinit.init.extension.checkpoint import record_vocabularies
    from lightning_embinit.init.transplant import transplant_tokenizer
    from lightning_embinit.text.tokenization import build_tokenizer

    model, checkpoint = _load_system(args.model)
    own = getattr(model, "tokenizer", None)
    new = build_tokenizer(args.tokenizer) if own is not None else args.tokenizer
    old = build_tokenizer(args.old_tokenizer) if args.old_tokenizer else None
    report = transplant_tokenizer(model, new, old_tokenizer=old, **options)
    checkpoint["state_dict"] = model.state_dict()
    checkpoint["hyper_parameters"] = {**(checkpoint.get("hyper_parameters") or {}), **dict(model.hparams)}
    record_vocabularies(checkpoint, model)
    for key in ("optimizer_states", "lr_schedulers", "loops"):  # a new model: it starts its own training
        checkpoint.pop(key, None)
    torch.save(checkpoint, args.output)
    return report


def _load_system(path: str) -> tuple[Any, dict[str, Any]]:
    """The Lightning system of a checkpoint, whatever the class it records, and the checkpoint itself."""
    from lightning_embinit.init.sources.checkpoint_file import load_checkpoint_file, saved_class
    from lightning_embinit.models.module import class_from_path

    checkpoint = load_checkpoint_file(path, what="--model", weights_only=False)
    recorded = saved_class(checkpoint)
    cls = class_from_path(recorded) if recorded else None
    if not isinstance(cls, type) or not callable(getattr(cls, "load_from_checkpoint", None)):
        raise ValueError(f"--model {path} does not record a model class that imports here ({recorded})")
    return cls.load_from_checkpoint(path, map_location="cpu").eval(), checkpoint


def transplant_main(argv: Sequence[str] | None = None) -> int:
    """``embinit transplant ...``: 0 when the new model is written, 2 for refused arguments, 1 when the run fails."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    _expand(args)
    if problem := _check(args):
        return _refuse(problem)
    try:
        options = _options(args)
    except ValueError as error:
        return _refuse(str(error))
    from lightning_embinit.init.transplant import format_transplant_report

    try:
        run = _checkpoint if Path(args.model).is_file() else _pretrained
        report = run(args, options)
    except ValueError as error:
        if environment_flag("EMBINIT_DEBUG"):
            raise
        return _refuse(str(error).splitlines()[0])
    except Exception as error:
        if environment_flag("EMBINIT_DEBUG"):
            raise
        print(
            f"embinit transplant: {type(error).__name__}: {error} (EMBINIT_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1
    print(format_transplant_report(report))
    print(f"wrote {args.output}")
    if Path(args.output).is_dir():
        (Path(args.output) / "transplant_report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0
