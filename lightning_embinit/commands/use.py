"""``embinit translate|generate|classify``: a trained model on new text, one output line per input line, in order
(options: docs/cli_reference.md).

Each loads the checkpoint with its class's ``load_from_checkpoint`` (on ``--device``, the CPU by default) and runs
the model's own method (``translate``, ``generate``, ``class_probabilities``; a causal HuggingFaceLM through
:func:`generate_hugging_face`) with its saved tokenizers. A bad argument, a missing file or a checkpoint of another
class is exit status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

COMMANDS = {
    "translate": ("TransformerSeq2Seq", "ReinforcedTransformerSeq2Seq"),
    "generate": ("TiedEmbeddingLM", "HuggingFaceLM"),
    "classify": ("TransformerClassifier",),
}
"""Each command and the classes (of :mod:`lightning_embinit.models`, or derived from them) it serves."""


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"embinit {command}",
        allow_abbrev=False,
        description=f"Run a trained {' or '.join(COMMANDS[command])} checkpoint on text: one output line per line.",
    )
    parser.add_argument("--ckpt_path", "--ckpt-path", required=True, help="a checkpoint saved by training")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", default="-", help="a text file, one input per line; - (default): stdin")
    parser.add_argument("--output", default="-", help="the file to write; - (default): stdout")
    parser.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, cuda:1, ...)")
    if command == "translate":
        parser.add_argument("--beam-size", type=int, help="beams (1: greedy); default: the model's")
        parser.add_argument("--max-length", type=int, help="most tokens per translation; default: the model's")
        parser.add_argument("--batch-size", type=int, default=64, help="sentences decoded together")
    elif command == "generate":
        source.add_argument("--prompt", help="one prompt (instead of --input)")
        parser.add_argument("--max-new-tokens", type=int, default=20, help="most tokens added to each prompt")
        parser.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; else sampling")
        parser.add_argument("--top-k", type=int, help="sample among the K most likely tokens (default: all)")
        parser.add_argument("--seed", type=int, default=0, help="the sampling generator's seed")
    else:
        parser.add_argument("--batch-size", type=int, default=64, help="sentences classified together")
        parser.add_argument(
            "--format", choices=("tsv", "jsonl"), default="tsv", help="label<TAB>text, or JSON with probabilities"
        )
    return parser


def _read_lines(source: str) -> list[str]:
    """The lines of a file or of stdin (``-``), line ends removed; a missing file or a directory is a ValueError."""
    if source == "-":
        return sys.stdin.read().splitlines()
    path = Path(source)
    if path.is_dir():
        raise ValueError(f"--input {source} is a directory, not a text file")
    if not path.exists():
        raise ValueError(f"--input {source}: no such file")
    return path.read_text(encoding="utf-8").splitlines()


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


def generate_hugging_face(
    model: Any, prompts: Sequence[str], *, max_new_tokens: int, temperature: float, top_k: int | None, seed: int
) -> list[str]:
    """Continue each prompt with a causal :class:`~lightning_embinit.models.HuggingFaceLM` as
    ``TiedEmbeddingLM.generate`` continues its own: the prompt encoded by the model's tokenizer after ``eos`` (the
    language-model data ends every line with it), up to ``max_new_tokens`` tokens chosen by
    :func:`~lightning_embinit.models.tied_lm.next_token` (never ``pad`` or ``bos``; greedy at temperature 0, else
    sampled with one generator seeded by ``seed``) over the model's last ``max_position_embeddings`` positions,
    stopping at ``eos``. Returns each continuation detokenized."""
    import torch

    from lightning_embinit.checks import check_non_negative_int, check_positive_int, check_range
    from lightning_embinit.models.tied_lm import continue_ids

    if model.hparams.objective != "causal":
        raise ValueError(
            f"generate continues text with a causal language model; this HuggingFaceLM ({model.hparams.model_type}) "
            f"was trained with objective={model.hparams.objective!r}: train one with objective='causal'"
        )
    check_non_negative_int("max_new_tokens", max_new_tokens)
    check_range("temperature", temperature, 0)
    check_positive_int("top_k", top_k, optional=True)
    tokenizer, device = model.tokenizer, model.device
    window = getattr(model.model.config, "max_position_embeddings", None)
    eos = tokenizer.eos_id
    banned = [i for i in (tokenizer.pad_id, tokenizer.bos_id) if i is not None and i != eos]
    generator = torch.Generator(device=device).manual_seed(seed)

    def last_logits(context: list[int]) -> torch.Tensor:
        return model(input_ids=torch.tensor([context], device=device)).logits[0, -1]

    results = []
    for prompt in prompts:
        ids = ([] if eos is None else [eos]) + tokenizer.encode(prompt)
        new = continue_ids(last_logits, ids, max_new_tokens, window, banned, eos, temperature, top_k, generator)
        results.append(tokenizer.decode(new))
    return results


def _outputs(
    command: str, model: Any, data: dict[str, Any], lines: list[str], options: argparse.Namespace
) -> list[str]:
    if command == "translate":
        return model.translate(
            lines, beam_size=options.beam_size, max_len=options.max_length, batch_size=options.batch_size
        )
    if command == "generate":
        from lightning_embinit.models import HuggingFaceLM
        from lightning_embinit.text.text_tokenizer import WORD_TOKENIZERS, WordTokenizer

        sampling = {name: getattr(options, name) for name in ("max_new_tokens", "temperature", "top_k", "seed")}
        if isinstance(model, HuggingFaceLM):
            return generate_hugging_face(model, lines, **sampling)
        kind = data.get("tokenizer", "regex")  # the word splitter of the data the LM was trained on
        if not isinstance(kind, str) or kind not in WORD_TOKENIZERS:
            raise ValueError(f"generate reads word-level text; this model was trained on tokenizer {kind!r}")
        return model.generate(lines, **sampling, tokenize=WordTokenizer(kind, lowercase=data.get("lowercase", True)))
    probabilities = model.class_probabilities(lines, batch_size=options.batch_size)
    labels = [model.label_names[k] for k in probabilities.argmax(dim=-1).tolist()]
    if options.format == "tsv":
        return [f"{label}\t{text}" for label, text in zip(labels, lines)]
    return [
        json.dumps({"text": text, "label": label, "probabilities": dict(zip(model.label_names, row))})
        for text, label, row in zip(lines, labels, probabilities.tolist())
    ]


def main(command: str, args: Sequence[str]) -> int:
    """``embinit COMMAND ...`` for a command of :data:`COMMANDS`: the exit status."""
    parser = _parser(command)
    options = parser.parse_args(list(args))
    try:
        model, data = load_model(command, options.ckpt_path, options.device)
        lines = [options.prompt] if getattr(options, "prompt", None) is not None else _read_lines(options.input)
        outputs = _outputs(command, model, data, lines, options)
    except (ValueError, TypeError) as error:
        print(f"{parser.prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    text = "".join(f"{line}\n" for line in outputs)
    if options.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(options.output).write_text(text, encoding="utf-8")
    return 0


translate_main = partial(main, "translate")
generate_main = partial(main, "generate")
classify_main = partial(main, "classify")
