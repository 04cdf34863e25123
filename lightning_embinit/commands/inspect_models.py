"""The models ``embinit inspect`` builds: a bare shape (:class:`ShapeModel`), or someone else's model from its config,
on the meta device (docs/howto/inspect.md).

A Hugging Face config (a directory holding ``config.json``, a hub name, or a model type and sizes) becomes the model
of the Auto class that fits it (:func:`auto_class`); a litgpt config name becomes ``litgpt.GPT``. Only the
``nn.Embedding`` tables get real CPU memory (:func:`on_meta`), initialized as the model initializes them: inspecting
a billion-parameter config allocates its embedding tables and nothing else.
"""

from __future__ import annotations

import difflib
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning_embinit.checks import check_choice, check_config_fields
from lightning_embinit.commands.inspect_limits import (
    HF_SIZES,
    LITGPT_SIZES,
    check_hf_sizes,
    check_litgpt_sizes,
    check_memory,
)
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.inputs import EmbeddingInput

POSITIONALS = ("sinusoidal", "none")

AUTO_CLASSES = (
    ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("AutoModel", "MODEL_MAPPING_NAMES"),
)
"""The Auto classes a config may be built with, in the order tried, and their model-type → class-name tables."""


class ShapeModel(nn.Module):
    """A bare shape to inspect: one slot ``"tokens"`` (N × D; its input scale and sinusoidal P or none), tied to an
    output layer when ``tied``."""

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        tied: bool = False,
        input_scale: str | float = "sqrt_d",
        positional: str = "sinusoidal",
        layout: str = "interleaved",
        max_len: int = 512,
        padding_idx: int | None = None,
    ) -> None:
        super().__init__()
        if vocab_size < 2 or dim < 1:
            raise ValueError(f"a table needs --vocab-size ≥ 2 and --dim ≥ 1, got {vocab_size} × {dim}")
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(
                f"--padding-idx {padding_idx} is not a row of the table's {vocab_size} rows (0 … {vocab_size - 1})"
            )
        check_choice("--positional", positional, POSITIONALS, hint="a learned table is inspected through --config")
        check_memory({"tokens": ((vocab_size, dim), torch.get_default_dtype())})
        table = nn.Embedding(vocab_size, dim, padding_idx=padding_idx)
        self.input = EmbeddingInput(
            table,
            scale=input_scale,
            positional=positional,
            layout=layout,
            max_len=max_len,
            scale_option="--input-scale",
        )
        self.head = nn.Linear(dim, vocab_size, bias=False, device="meta") if tied else None
        if tied:
            self.head.weight = table.weight

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        return {"tokens": self.input.slot("tokens", tied_modules=() if self.head is None else ("head",))}


def hugging_face_config(source: str | None, model_type: str | None, fields: Mapping[str, Any]) -> Any:
    """A ``PretrainedConfig`` from ``source`` (a directory with ``config.json`` or a hub name) or ``model_type``, with
    ``fields`` set (names as ``HF_SIZES`` gives them, or the config's own)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if source is None:
        if model_type not in CONFIG_MAPPING:
            close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING), n=3)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise ValueError(
                f"unknown --model-type {model_type!r}{hint}; transformers knows: {', '.join(sorted(CONFIG_MAPPING))}"
            )
        defaults = CONFIG_MAPPING[model_type]()
        _check_fields(defaults, fields)
        with _field_types(f"--model-type {model_type}"):
            return AutoConfig.for_model(model_type, **fields)
    local = _local_config(source)
    try:
        with _field_types(f"--hf-config {source}"):
            config, unused = AutoConfig.from_pretrained(local or source, return_unused_kwargs=True, **fields)
    except OSError as error:
        if local is not None:
            raise
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(
            f"--hf-config {source}: no such directory, and the hub gives no config for it: {reason}"
        ) from None
    _check_fields(config, unused)
    return config


@contextmanager
def _field_types(where: str) -> Iterator[None]:
    """transformers' refusal of a field's type (``n_embd`` 1000.0 for an int) as one ValueError naming ``where``."""
    from huggingface_hub.errors import StrictDataclassError

    try:
        yield
    except StrictDataclassError as error:
        raise ValueError(f"{where}: {' '.join(str(error).split())}") from None


def _local_config(source: str) -> str | None:
    """The local path ``source`` names (a directory holding ``config.json``, or a config file), None for a hub name;
    ValueError for a directory without ``config.json``, or a path that is not there and cannot be a hub name."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"--hf-config {source}: the directory holds no config.json (write one with config.save_pretrained(dir))"
            )
        return str(path)
    if path.exists():
        return str(path)
    try:
        validate_repo_id(source)
    except HFValidationError:
        raise ValueError(
            f"--hf-config {source}: no such directory; give a directory holding config.json "
            "(config.save_pretrained writes one) or a hub name such as openai-community/gpt2"
        ) from None
    return None


def _check_fields(config: Any, fields: Mapping[str, Any]) -> None:
    """:func:`~lightning_embinit.checks.check_config_fields` for ``--model-option``, naming the size options too."""
    try:
        check_config_fields(config, fields, "--model-option")
    except ValueError as error:
        sizes = ", ".join(f"--{option.replace('_', '-')} sets {field}" for option, field in HF_SIZES.items())
        raise ValueError(f"{error}; {sizes}") from None


def auto_class(config: Any) -> Any:
    """The Auto class whose model fits ``config``: the one whose model its ``architectures`` names, else the first of
    :data:`AUTO_CLASSES` that has its model type."""
    import transformers
    from transformers.models.auto import modeling_auto

    fitting = []
    for auto, table in AUTO_CLASSES:
        names = getattr(modeling_auto, table).get(config.model_type)
        if names is not None:
            fitting.append((getattr(transformers, auto), {names} if isinstance(names, str) else set(names)))
    if not fitting:
        raise ValueError(f"transformers builds no model for model type {config.model_type!r} from a config")
    named = [auto for auto, names in fitting if names & set(config.architectures or ())]
    return (named or [auto for auto, _ in fitting])[0]


def model_from_config(
    *,
    hf_config: str | None = None,
    model_type: str | None = None,
    litgpt_config: str | None = None,
    sizes: Mapping[str, int] | None = None,
    options: Mapping[str, Any] | None = None,
) -> nn.Module:
    """The model of a Hugging Face config (``hf_config`` or ``model_type``) or a litgpt config name, with ``sizes``
    (``vocab_size``, ``dim``, ``num_layers``, ``num_heads``) and other config fields ``options`` set; its sizes are
    checked (:mod:`~lightning_embinit.commands.inspect_limits`) before anything is built."""
    sizes, options = dict(sizes or {}), dict(options or {})
    if litgpt_config is not None:  # litgpt.GPT, its token table as GPT leaves it (torch's N(0, 1))
        try:
            from litgpt import GPT, Config
        except ImportError:
            raise ImportError("--litgpt-config needs litgpt (pip install litgpt)") from None
        fields = {field: value for size, value in sizes.items() for field in LITGPT_SIZES[size]}
        check_litgpt_sizes(litgpt_config, {**fields, **options}, options)
        config = _built(
            f"--litgpt-config {litgpt_config}", lambda: Config.from_name(litgpt_config, **{**fields, **options})
        )
        model = on_meta(lambda: _built(f"--litgpt-config {litgpt_config}", lambda: GPT(config)))
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                module.reset_parameters()
        return model
    fields = {HF_SIZES[size]: value for size, value in sizes.items()}
    config = hugging_face_config(hf_config, model_type, {**fields, **options})
    where = f"--hf-config {hf_config}" if hf_config is not None else f"--model-type {model_type}"
    check_hf_sizes(config, where, options)
    cls = auto_class(config)
    model = on_meta(lambda: _built(where, lambda: cls.from_config(config)))
    model.init_weights()  # initializes the real tables as from_config on the CPU would, and re-ties the head
    return model


def _built(where: str, build: Callable[[], Any]) -> Any:
    """``build()``; an error of the library's own checks (an assert, a shape it refuses) as one ValueError naming the
    config and the library's reason."""
    try:
        return build()
    except (AssertionError, RuntimeError, ValueError, TypeError, IndexError, KeyError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        if not reason:
            frames = traceback.extract_tb(error.__traceback__)
            reason = f"{type(error).__name__} at {frames[-1].line!r}" if frames else type(error).__name__
        raise ValueError(f"{where}: the config does not build a model: {reason}") from None


def on_meta(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` on the meta device, then every ``nn.Embedding``'s parameters and buffers re-created (uninitialized)
    on the CPU, once :func:`~lightning_embinit.commands.inspect_limits.check_memory` finds room for them; a module
    that shares a table's weight (a tied head) shares the new one."""
    with torch.device("meta"):
        model = build()
    tables: dict[int, tuple[str, torch.Tensor]] = {}
    for prefix, table in model.named_modules():
        if isinstance(table, nn.Embedding):
            for name, tensor in (*table.named_buffers(recurse=False), *table.named_parameters(recurse=False)):
                tables.setdefault(id(tensor), (f"{prefix}.{name}", tensor))
    check_memory({name: (tuple(tensor.shape), tensor.dtype) for name, tensor in tables.values()})
    real: dict[int, nn.Parameter] = {}
    for table in model.modules():
        if isinstance(table, nn.Embedding):
            for name, buffer in table.named_buffers(recurse=False):  # Gemma's embed_scale
                setattr(table, name, torch.empty_like(buffer, device="cpu"))
            for weight in table.parameters(recurse=False):
                real.setdefault(id(weight), nn.Parameter(torch.empty_like(weight, device="cpu"), weight.requires_grad))
    for module in model.modules():
        for name, weight in list(module.named_parameters(recurse=False)):
            if id(weight) in real:
                setattr(module, name, real[id(weight)])
    return model
