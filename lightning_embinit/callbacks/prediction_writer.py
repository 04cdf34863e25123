"""Predictions to a file: :class:`PredictionWriter`, the ``BasePredictionWriter`` behind ``embinit predict``, and
:func:`prediction_line`, the one line per record that it and ``embinit translate|generate|classify`` write.

The systems' ``predict_step`` returns records (:mod:`lightning_embinit.models.prediction`): a dict per example with
its ``index`` (its row in the predicted set), its input and its output. The writer collects them batch by batch,
gathers every rank's under DDP (each example once: a sampler that repeats examples to even out the ranks adds
nothing), and writes them in ``index`` order, one line each, from rank 0.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from typing_extensions import override

from lightning_embinit.checks import check_choice
from lightning_embinit.models.prediction import OUTPUT_FIELDS

FORMATS = ("text", "tsv", "jsonl")
"""``text``: the output alone; ``tsv``: output, a tab, the input; ``jsonl``: the record as JSON (without ``index``)."""


def prediction_line(record: Mapping[str, Any], form: str = "text") -> str:
    """One line for a prediction record, in :data:`FORMATS` ``form``. An output that is None (a blank input's
    classification) is an empty ``text`` or ``tsv`` line; ``jsonl`` keeps the nulls. Token ids (a translation
    system without a target tokenizer) are written as numbers separated by spaces."""
    if form == "jsonl":
        return json.dumps({key: value for key, value in record.items() if key != "index"}, ensure_ascii=False)
    field = next((name for name in OUTPUT_FIELDS if name in record), None)
    if field is None:
        raise ValueError(f"a prediction record needs one of the fields {list(OUTPUT_FIELDS)}; got {sorted(record)}")
    output = record[field]
    if output is None:
        return ""
    output = " ".join(map(str, output)) if isinstance(output, (list, tuple)) else str(output)
    if form == "tsv":
        given = record.get(OUTPUT_FIELDS[field])
        return "" if not output and not (given or "").strip() else f"{output}\t{'' if given is None else given}"
    return output


def check_output_file(path: str | os.PathLike[str], option: str = "output_path") -> Path:
    """``path`` as a file that can be written: not a directory, in a directory that exists and can be written
    (else a ValueError naming ``option``)."""
    file = Path(os.path.expanduser(os.fspath(path)))
    if file.is_dir():
        raise ValueError(f"{option} {os.fspath(path)} is a directory; name a file (e.g. {file / 'predictions.txt'})")
    if not file.parent.is_dir():
        raise ValueError(
            f"{option} {os.fspath(path)}: the directory {file.parent} does not exist; create it or choose another path"
        )
    if not os.access(file if file.exists() and not file.is_file() else file.parent, os.W_OK):
        raise ValueError(f"{option} {os.fspath(path)}: no permission to write there; choose another path")
    return file


class PredictionWriter(BasePredictionWriter):
    """Write every prediction record of a ``Trainer.predict`` run to ``output_path``, one :func:`prediction_line`
    each in ``format``, in ``index`` order (module docstring); the file is replaced when the run ends.

    Args:
        output_path: the file to write (its directory must exist, and it may not be the datamodule's
            ``predict_files``; checked at setup, before any batch)
        format: one of :data:`FORMATS`
    """

    def __init__(self, output_path: str, format: str = "text") -> None:  # noqa: A002 (the option's name)
        super().__init__(write_interval="batch")
        self.format = check_choice("format", format, FORMATS)
        self.output_path = os.fspath(output_path)
        self._records: list[tuple[int, Mapping[str, Any]]] = []

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if stage != "predict":
            return
        file = check_output_file(self.output_path)
        given = getattr(getattr(trainer, "datamodule", None), "hparams", {}).get("predict_files")
        for source in [given] if isinstance(given, (str, os.PathLike)) else given or []:
            if file.exists() and os.path.exists(source) and os.path.samefile(file, source):
                raise ValueError(
                    f"output_path {self.output_path} is the datamodule's predict_files {os.fspath(source)}: writing it "
                    "would destroy the prompts; choose another output path"
                )

    @override
    def on_predict_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._records = []

    @override
    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        if not isinstance(prediction, Sequence) or not all(
            isinstance(record, Mapping) and "index" in record for record in prediction
        ):
            raise TypeError(
                f"PredictionWriter writes prediction records (a list of dicts with an 'index'); "
                f"{type(pl_module).__name__}.predict_step returned a {type(prediction).__name__}"
            )
        self._records += [(dataloader_idx, record) for record in prediction]

    @override
    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        records = self._records
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, records)
            records = [item for part in gathered for item in part]
        if trainer.is_global_zero:
            unique = {(loader, int(record["index"])): record for loader, record in reversed(records)}
            lines = [prediction_line(unique[key], self.format) + "\n" for key in sorted(unique)]
            write_text_replacing(check_output_file(self.output_path), "".join(lines))
        trainer.strategy.barrier("PredictionWriter")


def write_text_replacing(path: Path, text: str) -> None:
    """``text`` (UTF-8) as the whole of ``path``, written beside it first: a failed write leaves the old file (a
    device or pipe, such as ``/dev/null``, is written directly)."""
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", newline="\n") as file:
            file.write(text)
        return
    mask = os.umask(0)
    os.umask(mask)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as file:
            file.write(text)
        os.chmod(temporary, 0o666 & ~mask)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
