"""``embinit inspect``: check an embedding start before paying for a run (docs/concepts.md#absorption, #tied-head;
usage in docs/diagnostics.md).

The model comes from a config (parsed by ``embinit fit``'s LightningCLI parser: model, datamodule and trainer
callbacks are instantiated, nothing is trained), from a Hugging Face or litgpt config (built on the meta device by
:mod:`lightning_embinit.commands.inspect_models`) or from a bare shape. The config's
:class:`~lightning_embinit.callbacks.EmbeddingInitCallback`, its options overridden by ``--source``,
``--standardize``, ... ``--tokens``, is applied by its own engine
(:meth:`~lightning_embinit.init.engine.EmbeddingInitializer.run`); without the callback and options the model's
own initialization is shown. The result is :func:`lightning_embinit.diagnostics.inspect.inspection`. Only
``--config`` imports Lightning.
"""

from __future__ import annotations

import argparse
import inspect as pyinspect
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from lightning_embinit.checks import check_finite, check_int, choice_error
from lightning_embinit.commands.inspect_models import POSITIONALS, ShapeModel, model_from_config
from lightning_embinit.diagnostics.absorption import POSITIONAL_THRESHOLD, SEMANTIC_THRESHOLD
from lightning_embinit.diagnostics.inspect import format_inspection, inspection
from lightning_embinit.init.engine import EmbeddingInitializer
from lightning_embinit.init.host import discover_slots
from lightning_embinit.init.pipeline import slot_report
from lightning_embinit.init.positional import LAYOUTS
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.tokens import load_tokens
from lightning_embinit.modules.inputs import resolve_scale

SHAPE_DEFAULTS = {
    "input_scale": "sqrt_d",
    "positional": "sinusoidal",
    "positional_layout": "interleaved",
    "max_len": 512,
    "padding_idx": None,
}
"""The options only a bare shape takes (a model config brings its own), with their defaults."""
SIZES = ("vocab_size", "dim", "num_layers", "num_heads")
CALLBACK_OPTIONS = ("source", "transforms", "standardize", "match", "shuffle", "scale", "trainable", "seed", "tokens")


def _scalar(text: str) -> Any:
    """A number when ``text`` reads as one, else the string (``"xavier"``, ``"0.02"`` → 0.02)."""
    try:
        return float(text)
    except ValueError:
        return text


def _integer(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ≥ ``minimum`` (argparse names the option in its error)."""

    def parse(text: str) -> int:
        try:
            return check_int("value", int(text), minimum=minimum)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {minimum}, got {text!r}") from None

    return parse


def _finite(text: str) -> float:
    """An argparse type: a finite number."""
    try:
        return check_finite("value", float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}") from None


def _trainable(text: str) -> bool | str:
    """``--trainable``: true, false or pretrained_rows, in any case."""
    choices = {"true": True, "false": False, "pretrained_rows": "pretrained_rows"}
    if text.lower() not in choices:
        raise argparse.ArgumentTypeError(str(choice_error("value", text, choices)))
    return choices[text.lower()]


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group(
        "model: a config as `embinit fit` takes it, a Hugging Face or litgpt config, or a bare shape"
    )
    which = model.add_mutually_exclusive_group()
    which.add_argument("--config", help="a LightningCLI config (model, data, trainer.callbacks)")
    which.add_argument(
        "--hf-config", metavar="DIR_OR_NAME", help="a Hugging Face config: a directory holding config.json, a hub name"
    )
    which.add_argument("--model-type", help="a Hugging Face model type (llama, gpt2, bert, ...), sized by the options")
    which.add_argument("--litgpt-config", metavar="NAME", help="a litgpt config name (pythia-14m, Llama-3.2-1B, ...)")
    model.add_argument("--vocab-size", type=_integer(2), help="rows N (a bare shape's; overrides a model config's)")
    model.add_argument("--dim", type=_integer(1), help="dimension D (a bare shape's; a model config's hidden size)")
    model.add_argument("--num-layers", type=_integer(1), help="model config: layers (built on meta, never allocated)")
    model.add_argument("--num-heads", type=_integer(1), help="model config: attention heads")
    model.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model config: any other field, the value read as JSON when it parses (repeatable)",
    )
    model.add_argument(
        "--tied", action="store_true", help="the output layer reuses the table (HF: tie_word_embeddings)"
    )


def _add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The bare shape's options; each defaults to None (:data:`SHAPE_DEFAULTS` fills it in), so that one given with
    a model config is refused even when it names the default."""
    shape = parser.add_argument_group("bare shape (a model config brings its own)")
    shape.add_argument("--input-scale", help="sqrt_d (default), inv_sqrt_d, none, or a number")
    shape.add_argument("--positional", choices=POSITIONALS, help="default: sinusoidal")
    shape.add_argument("--positional-layout", choices=LAYOUTS, help="default: interleaved")
    shape.add_argument("--max-len", type=_integer(1), help="positions in the encoding (default: 512)")
    shape.add_argument("--padding-idx", type=_integer(0), help="the padding row")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embinit inspect",
        allow_abbrev=False,
        description="Check an embedding start before training: init report, absorption, [S] initial loss, verdict. "
        "Arguments not listed here are passed to the config's LightningCLI parser "
        "(e.g. --model.init_args.architecture.d_model 64).",
    )
    _add_model_arguments(parser)
    _add_shape_arguments(parser)
    init = parser.add_argument_group("EmbeddingInitCallback options (override the config's)")
    init.add_argument("--source", help="a scheme (xavier, normal:0.02, ...), a source name, file:<path>, hf:<dir>, ...")
    init.add_argument("--standardize", type=_scalar, help="a scheme name or a std")
    init.add_argument("--match", type=_scalar, help="a reference source, scheme or std")
    init.add_argument(
        "--transforms",
        nargs="+",
        metavar="SPEC",
        help="transforms run before --standardize/--match: center, remove_top[:k], whiten[:eps], ...",
    )
    init.add_argument("--shuffle", action="store_true", default=None)
    init.add_argument("--scale", type=_finite)
    init.add_argument("--trainable", type=_trainable, help="true, false or pretrained_rows")
    init.add_argument("--seed", type=int, help="default: the config's, else 0")
    init.add_argument(
        "--tokens", help="token strings for the table: a file (one per line) or a tokenizer name/directory"
    )
    init.add_argument(
        "--source-option", action="append", default=[], metavar="KEY=VALUE", help="a source option (repeatable)"
    )
    diagnostics = parser.add_argument_group("diagnostics")
    diagnostics.add_argument("--sample-rows", type=_integer(1), default=1024, help="rows sampled for absorption")
    diagnostics.add_argument("--neighbours", type=_integer(1), default=5, help="k of the nearest-neighbour survival")
    diagnostics.add_argument(
        "--max-position", type=_integer(1), help="sample positions below this (default: all rows of P)"
    )
    diagnostics.add_argument(
        "--positional-threshold",
        type=_finite,
        default=POSITIONAL_THRESHOLD,
        help="a positional retention below this: the tokens drown the positions",
    )
    diagnostics.add_argument(
        "--semantic-threshold",
        type=_finite,
        default=SEMANTIC_THRESHOLD,
        help="a semantic retention below this: the positions drown the tokens",
    )
    diagnostics.add_argument(
        "--margin", type=_finite, default=1.0, help="tied head: predicted loss above ln n + margin is a problem"
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    return parser


def _key_values(option: str, items: Sequence[str], parse: Callable[[str], Any]) -> dict[str, Any]:
    """``KEY=VALUE`` items of a repeatable option as a dict, each value parsed."""
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} takes KEY=VALUE, got {item!r}")
        parsed[key] = parse(value)
    return parsed


def _json_or_text(text: str) -> Any:
    """``2`` → 2, ``true`` → True, ``1e6`` → 1000000.0, ``gelu`` → "gelu"."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _callback_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides = {name: getattr(args, name) for name in CALLBACK_OPTIONS if getattr(args, name) is not None}
    if args.source_option:
        overrides["source_options"] = _key_values("--source-option", args.source_option, _scalar)
    return overrides


def _option_initializer(args: argparse.Namespace) -> EmbeddingInitializer | None:
    """The initializer of the command line's options alone (seed 0 unless given), or None without options: the
    engine the callback runs, without importing Lightning."""
    options = _callback_overrides(args)
    if not options:
        return None
    seed, tokens = options.pop("seed", 0), options.pop("tokens", None)
    return EmbeddingInitializer(InitRecipe(**options), seed=seed, tokens=tokens)


def _from_config(args: argparse.Namespace, extra: Sequence[str]) -> tuple[nn.Module, Any, EmbeddingInitializer | None]:
    """(model, datamodule, the callback's initializer or None) from a config, through ``embinit fit``'s parser."""
    from lightning_embinit.callbacks.embedding_init import EmbeddingInitCallback
    from lightning_embinit.commands.lightning_cli import embinit_cli
    from lightning_embinit.models.module import class_from_path

    with warnings.catch_warnings():  # `embinit inspect` hands LightningCLI its own args, not sys.argv
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = embinit_cli(
            ["--config", args.config, *extra],
            run=False,
            save_config_callback=None,
            parser_kwargs={"prog": "embinit inspect"},
        )
    overrides = _callback_overrides(args)
    configured = []  # the init arguments of the config's EmbeddingInitCallback
    for entry in cli.config.get("trainer.callbacks") or []:
        cls = class_from_path(str(entry.class_path))
        if isinstance(cls, type) and issubclass(cls, EmbeddingInitCallback):
            configured.append(dict(entry.init_args.as_dict()) if entry.get("init_args") is not None else {})
    instances = [c for c in cli.trainer.callbacks if isinstance(c, EmbeddingInitCallback)]
    if len(instances) > 1:
        raise ValueError(
            f"the config has {len(instances)} EmbeddingInitCallbacks; inspect takes one (merge them with slots=)"
        )
    if not instances:
        return cli.model, cli.datamodule, _option_initializer(args)
    if overrides:
        arguments = configured[0] if configured else {}
        return cli.model, cli.datamodule, EmbeddingInitCallback(**{**arguments, **overrides}).initializer
    initializer = instances[0].initializer
    if initializer.seed is None:
        initializer.seed = 0
    return cli.model, cli.datamodule, initializer


def _from_model_config(args: argparse.Namespace) -> tuple[nn.Module, Any, EmbeddingInitializer | None]:
    """(model, None, initializer or None) from a Hugging Face or litgpt config
    (:mod:`lightning_embinit.commands.inspect_models`); no option: the model's own initialization."""
    shape_only = [f"--{name.replace('_', '-')}" for name in SHAPE_DEFAULTS if getattr(args, name) is not None]
    if shape_only:
        raise ValueError(
            f"{', '.join(shape_only)}: a bare shape's option; a model config brings its own input scale, positions "
            "and padding row (set its config fields with --model-option KEY=VALUE)"
        )
    options = _key_values("--model-option", args.model_option, _json_or_text)
    if args.tied:
        if args.litgpt_config:
            raise ValueError("--tied: litgpt's GPT has its own lm_head, never tied to the token table")
        options["tie_word_embeddings"] = True
    model = model_from_config(
        hf_config=args.hf_config,
        model_type=args.model_type,
        litgpt_config=args.litgpt_config,
        sizes={name: getattr(args, name) for name in SIZES if getattr(args, name) is not None},
        options=options,
    )
    return model, None, _option_initializer(args)


def _from_shape(args: argparse.Namespace) -> tuple[nn.Module, Any, EmbeddingInitializer]:
    """(model, None, initializer) of a bare shape: torch and the init engine only, no Lightning."""
    vocab_size = args.vocab_size
    if vocab_size is None and args.tokens is not None:
        vocab_size = len(load_tokens(args.tokens, what="--tokens ").tokens)
    if vocab_size is None or args.dim is None:
        raise ValueError("give --config, or a bare shape with --vocab-size (or --tokens) and --dim")
    shape = {
        name: default if getattr(args, name) is None else getattr(args, name)
        for name, default in SHAPE_DEFAULTS.items()
    }
    model = ShapeModel(
        vocab_size,
        args.dim,
        tied=args.tied,
        input_scale=resolve_scale(shape["input_scale"], args.dim, option="--input-scale"),
        positional=shape["positional"],
        layout=shape["positional_layout"],
        max_len=shape["max_len"],
        padding_idx=shape["padding_idx"],
    )
    return model, None, _option_initializer(args) or EmbeddingInitializer(seed=0)


def _model_loss(model: nn.Module, datamodule: Any, method: str) -> float | None:
    """The module's own ``initial_loss_prediction`` or ``initial_loss_probe`` (TiedEmbeddingLM's: [S]'s estimate, its
    loss on random tokens), at the datamodule's ``seq_len`` when it has one and the method takes a ``length``."""
    function = getattr(model, method, None)
    if not callable(function):
        return None
    length = getattr(datamodule, "seq_len", None)
    takes_length = "length" in pyinspect.signature(function).parameters
    return function(length=length) if takes_length and isinstance(length, int) else function()


@torch.no_grad()
def run_inspection(args: argparse.Namespace, extra: Sequence[str] = ()) -> dict[str, Any]:
    """The inspection (:func:`~lightning_embinit.diagnostics.inspect.inspection`) for parsed arguments."""
    if args.config is None and extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)} (extra arguments go to a --config's parser)")
    model_config = args.hf_config or args.model_type or args.litgpt_config
    if not model_config and (args.num_layers is not None or args.num_heads is not None or args.model_option):
        raise ValueError(
            "--num-layers, --num-heads and --model-option size a --hf-config, --model-type or --litgpt-config"
        )
    if args.config:
        model, datamodule, initializer = _from_config(args, extra)
    elif model_config:
        model, datamodule, initializer = _from_model_config(args)
    else:
        model, datamodule, initializer = _from_shape(args)
    pretrained_rows = None
    if initializer is None:  # no callback in the config: the tables as the model initialized them
        recipe = InitRecipe(source="model")
        reports = {name: slot_report(slot, None, recipe, seed=None) for name, slot in discover_slots(model).items()}
        for report in reports.values():
            report["source"] = "the model's own initialization"
    else:
        initialized = initializer.run(model, datamodule=datamodule)
        reports, pretrained_rows = initialized.reports, initialized.pretrained_rows
    slots = discover_slots(model)
    estimate = _model_loss(model, datamodule, "initial_loss_prediction")
    tied = [name for name in reports if slots[name].is_tied]
    probe = _model_loss(model, datamodule, "initial_loss_probe") if len(tied) == 1 else None
    return inspection(
        slots,
        reports,
        predicted_model={tied[0]: estimate} if len(tied) == 1 and estimate is not None else None,
        probed={tied[0]: probe} if probe is not None else None,
        pretrained_rows=pretrained_rows,
        sample_rows=args.sample_rows,
        neighbours=args.neighbours,
        max_position=args.max_position,
        positional_threshold=args.positional_threshold,
        semantic_threshold=args.semantic_threshold,
        loss_margin=args.margin,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``embinit inspect ARGS``: print the inspection as a table or JSON; 0 on success, 2 on bad input (one line on
    stderr, long values summarized; ``EMBINIT_DEBUG=1`` re-raises the error with its traceback)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    try:
        result = run_inspection(args, extra)
    except (ValueError, TypeError, LookupError, OSError, ImportError) as error:
        from lightning_embinit.commands.lightning_cli import debug_requested, print_error

        if debug_requested():
            raise
        print_error("embinit inspect", error)
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.format == "json" else format_inspection(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
