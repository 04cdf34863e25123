"""``embinit translate|generate|classify``: a trained model on new text, one output line per input line, in order
(options: docs/cli_reference.md).

Every argument is checked first (:mod:`lightning_embinit.commands.arguments`: ``--output``, ``--device``, the input
text); then the checkpoint is loaded with its class's ``load_from_checkpoint`` (on ``--device``, the CPU by default)
and the model's own prediction path runs (``translate_texts``, ``continue_batch``, ``classify_texts``: the records
its ``predict_step`` gives ``embinit predict``), written by
:func:`~lightning_embinit.callbacks.prediction_writer.prediction_line`. A blank input line is not run: its output
line is empty. A refused argument, a missing file or a checkpoint of another class is exit status 2 and one line on
stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from lightning_embinit.commands.arguments import (
    CommandParser,
    check_device,
    check_output,
    encoding_name,
    int_at_least,
    non_negative_float,
    read_input_lines,
)

COMMANDS = {
    "translate": ("TransformerSeq2Seq", "ReinforcedTransformerSeq2Seq"),
    "generate": ("TiedEmbeddingLM", "HuggingFaceLM"),
    "classify": ("TransformerClassifier",),
}
"""Each command and the classes (of :mod:`lightning_embinit.models`, or derived from them) it serves."""
FORMATS = {"translate": "text", "generate": "text", "classify": "tsv"}
"""Each command's default ``--format`` (:data:`lightning_embinit.callbacks.prediction_writer.FORMATS`)."""


def _parser(command: str) -> CommandParser:
    parser = CommandParser(
        prog=f"embinit {command}",
        description=f"Run a trained {' or '.join(COMMANDS[command])} checkpoint on text: one output line per input "
        "line, in order (a blank line gives an empty line, without running the model).",
    )
    parser.add_argument("--ckpt_path", "--ckpt-path", required=True, help="a checkpoint saved by training")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", default="-", help="a text file, one input per line (default: -, stdin)")
    parser.add_argument("--output", default="-", help="the file to write (default: -, stdout); never the input")
    parser.add_argument("--encoding", type=encoding_name, default="utf-8", help="of the input (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu (default), cuda, cuda:N, mps")
    parser.add_argument(
        "--format",
        choices=("text", "tsv", "jsonl"),
        default=FORMATS[command],
        help="text: the output; tsv: output<TAB>input; jsonl: a JSON record per line (default: %(default)s)",
    )
    if command == "translate":
        parser.add_argument("--beam-size", type=int_at_least(1), help="beams, 1: greedy (default: the model's)")
        parser.add_argument(
            "--max-length", type=int_at_least(1), help="most tokens per translation (default: the model's)"
        )
        parser.add_argument(
            "--batch-size", type=int_at_least(1), default=64, help="sentences decoded together (default: %(default)s)"
        )
    elif command == "generate":
        source.add_argument("--prompt", help="one prompt (instead of --input)")
        parser.add_argument(
            "--max-new-tokens", type=int_at_least(0), default=20, help="most tokens added (default: %(default)s)"
        )
        parser.add_argument(
            "--temperature", type=non_negative_float, default=0.0, help="0 (default): greedy; above 0: sampling"
        )
        parser.add_argument(
            "--top-k", type=int_at_least(1), help="sample among the K most likely tokens (default: all)"
        )
        parser.add_argument(
            "--seed", type=int_at_least(0), default=0, help="prompt k samples with seed + k (default: %(default)s)"
        )
        parser.add_argument(
            "--no-unk",
            action="store_true",
            help="never generate the unknown token (by default it can be chosen and is printed as is, e.g. <unk>)",
        )
    else:
        parser.add_argument(
            "--batch-size",
            type=int_at_least(1),
            default=64,
            help="sentences classified together (default: %(default)s)",
        )
    return parser


def load_model(command: str, path: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """The model of checkpoint ``path`` in evaluation mode on ``device``, if its class is one ``command`` serves
    (else a ValueError naming the checkpoint's class and the command that serves it), and the checkpoint's
    datamodule hyperparameters."""
    from lightning_embinit import models
    from lightning_embinit.init.sources.checkpoint_file import load_checkpoint_file, saved_class
    from lightning_embinit.models.module import class_from_path

    checkpoint = load_checkpoint_file(path, what="--ckpt_path")
    recorded = saved_class(checkpoint)
    cls = class_from_path(recorded) if recorded else None
    if not isinstance(cls, type):
        raise ValueError(f"--ckpt_path {path} does not record a model class that imports here ({recorded})")
    served = tuple(getattr(models, name) for name in COMMANDS[command])
    if not issubclass(cls, served):
        others = [
            name for name, classes in COMMANDS.items() if issubclass(cls, tuple(getattr(models, c) for c in classes))
        ]
        hint = f"`embinit {others[0]}` serves it" if others else "no embinit command serves it"
        raise ValueError(f"--ckpt_path {path} holds a {cls.__name__}, not a {' or '.join(COMMANDS[command])}: {hint}")
    model = cls.load_from_checkpoint(path, map_location=device)
    return model.to(device).eval(), dict(checkpoint.get("datamodule_hyper_parameters") or {})


def _records(
    command: str, model: Any, data: dict[str, Any], lines: list[str], options: argparse.Namespace
) -> list[dict[str, Any]]:
    """The model's prediction records of ``lines`` (:mod:`lightning_embinit.models.prediction`)."""
    if command == "translate":
        return model.translate_texts(
            lines, beam_size=options.beam_size, max_len=options.max_length, batch_size=options.batch_size
        )
    if command == "classify":
        return model.classify_texts(lines, batch_size=options.batch_size)
    from lightning_embinit.models import HuggingFaceLM
    from lightning_embinit.models.prediction import Generation
    from lightning_embinit.text.prompts import prompt_batch
    from lightning_embinit.text.text_tokenizer import WORD_TOKENIZERS, WordTokenizer

    generation = Generation(options.max_new_tokens, options.temperature, options.top_k, options.seed, options.no_unk)
    if isinstance(model, HuggingFaceLM):
        encode = model.tokenizer.encode
    else:
        kind = data.get("tokenizer", "regex")  # the word splitter of the data the LM was trained on
        if not isinstance(kind, str) or kind not in WORD_TOKENIZERS:
            raise ValueError(f"generate reads word-level text; this model was trained on tokenizer {kind!r}")
        words = WordTokenizer(kind, lowercase=data.get("lowercase", True))

        def encode(text: str) -> list[int]:
            return model.model.vocab.encode(words(text))

    return model.continue_batch(prompt_batch(lines, encode), generation)


def main(command: str, args: Sequence[str]) -> int:
    """``embinit COMMAND ...`` for a command of :data:`COMMANDS`: the exit status."""
    parser = _parser(command)
    options = parser.parse_args(list(args))
    try:
        check_output(options.output, [("--input", options.input), ("--ckpt_path", options.ckpt_path)])
        device = check_device(options.device)
        prompt = getattr(options, "prompt", None)
        lines = [prompt] if prompt is not None else read_input_lines(options.input, options.encoding)
        model, data = load_model(command, options.ckpt_path, device)
        records = _records(command, model, data, lines, options)
    except (ValueError, TypeError) as error:
        print(f"{parser.prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    from lightning_embinit.callbacks.prediction_writer import prediction_line, write_text_replacing

    text = "".join(f"{prediction_line(record, options.format)}\n" for record in records)
    if options.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text_replacing(Path(options.output).expanduser(), text)
    return 0


translate_main = partial(main, "translate")
generate_main = partial(main, "generate")
classify_main = partial(main, "classify")
