"""Prompts for a language model's ``predict_step`` (:class:`~lightning_embinit.data.LanguageModelDataModule`'s
``predict_files``, ``embinit generate``): one prompt per line, blank lines kept so the outputs line up with the
input. A batch is a dict: ``index`` (a long tensor of the prompts' rows), ``prompt`` (their text) and ``input_ids``
(a list of id lists, no special token added; a blank prompt's is empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset


class PromptDataset(Dataset):
    """Prompts and their ids (``encode``: text → ids; not called on a blank prompt)."""

    def __init__(self, prompts: Sequence[str], encode: Callable[[str], list[int]]) -> None:
        self.prompts = list(prompts)
        self.ids = [encode(prompt) if prompt.strip() else [] for prompt in self.prompts]

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"index": i, "prompt": self.prompts[i], "input_ids": self.ids[i]}


def collate_prompts(examples: list[dict[str, Any]]) -> dict[str, Any]:
    """Examples of :class:`PromptDataset` → a batch (module docstring)."""
    return {
        "index": torch.tensor([e["index"] for e in examples], dtype=torch.long),
        "prompt": [e["prompt"] for e in examples],
        "input_ids": [list(e["input_ids"]) for e in examples],
    }


def prompt_batch(prompts: Sequence[str], encode: Callable[[str], list[int]]) -> dict[str, Any]:
    """All ``prompts`` as one batch, rows 0 … n − 1."""
    data = PromptDataset(prompts, encode)
    return collate_prompts([data[i] for i in range(len(data))])
