"""``embinit predict --config CONFIG --ckpt_path CHECKPOINT --output FILE``: LightningCLI's ``predict``
(``Trainer.predict`` over the datamodule's predict data: a translation or classification datamodule's test split,
else its first validation split; a language-model datamodule's ``predict_files`` prompts), the system's
``predict_step`` records written to ``--output`` by :class:`~lightning_embinit.callbacks.PredictionWriter` in
``--format``, one line per example, in the data's order.

``--output`` and ``--format`` are this command's own options, read before LightningCLI's; the rest are
LightningCLI's (``embinit predict --help``). ``--output`` is checked (its directory exists, it is not a directory
and not the config, the checkpoint or the prompts file) before anything is built.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Sequence

from lightning_embinit.commands.arguments import CommandParser, check_output

PREDICT_DESCRIPTION = (
    "Runs Trainer.predict over the datamodule's predict data (translation, classification: the test split, else "
    "the first validation split; language model: --data.init_args.predict_files, one prompt per line) and writes "
    "the model's predictions to --output FILE (required), one line per example in the data's order, in --format "
    "text (the output; default), tsv (output<TAB>input) or jsonl (each record as JSON). A blank input gives an "
    "empty output."
)


def _own_options() -> CommandParser:
    parser = CommandParser(prog="embinit predict", add_help=False)
    parser.add_argument("--output", help="the file the predictions are written to")
    parser.add_argument("--format", choices=("text", "tsv", "jsonl"), default="text")
    return parser


def _values(argv: Sequence[str], option: str) -> list[str]:
    """The values given to a LightningCLI ``option`` (``--option VALUE`` or ``--option=VALUE``)."""
    values = []
    for k, item in enumerate(argv):
        if item == option and k + 1 < len(argv):
            values.append(argv[k + 1])
        elif item.startswith(f"{option}="):
            values.append(item.split("=", 1)[1])
    return values


def predict_main(argv: Sequence[str], lightning_main: Callable[..., int]) -> int:
    """``embinit predict ...`` (``argv`` after ``predict``): the exit status of ``lightning_main``
    (:func:`lightning_embinit.commands.main.lightning_main`) run with a :class:`PredictionWriter` on ``--output``;
    exit status 2 when ``--output`` is missing or cannot be written."""
    parser = _own_options()
    options, rest = parser.parse_known_args(list(argv))
    if {"-h", "--help"} & set(rest) or any(item.startswith("--print_config") for item in rest):
        return lightning_main(["predict", *rest], parser_kwargs={"predict": {"description": PREDICT_DESCRIPTION}})
    if options.output is None:
        given = [item.split("=", 1)[0] for item in rest if item.startswith("-")]
        close = difflib.get_close_matches("--output", given, n=1, cutoff=0.7)
        hint = f" (not {close[0]})" if close else ""
        parser.error(f"give --output FILE: the file the predictions are written to{hint}")
    inputs = ("--config", "--ckpt_path", "--data.init_args.predict_files")
    others = [(option, value) for option in inputs for value in _values(rest, option)]
    try:
        check_output(options.output, others)
    except ValueError as error:
        parser.error(str(error))
    from lightning_embinit.callbacks.prediction_writer import PredictionWriter

    writer = PredictionWriter(options.output, options.format)
    with warnings.catch_warnings():
        # LightningCLI warns when it is given args while sys.argv holds arguments too: here the args are sys.argv's
        # less this command's own options, on purpose
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        return lightning_main(
            ["predict", *rest],
            trainer_defaults={"callbacks": [writer]},
            parser_kwargs={"predict": {"description": PREDICT_DESCRIPTION}},
        )
