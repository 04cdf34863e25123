"""Any Hugging Face causal or masked language model, built from its config, as a Lightning system
(:class:`HuggingFaceLM`), to compare embedding starts on a GPT-2-, LLaMA- or BERT-shaped model. The network
(``AutoModelForCausalLM`` / ``AutoModelForMaskedLM`` ``.from_config``) and the loss's definition (mean cross-entropy
over the labels that are not -100) are ``transformers``' own; the callbacks read its tokens from ``tokenizer``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from typing_extensions import override

from lightning_embinit.checks import check_choice, check_config_fields, check_range, check_texts
from lightning_embinit.models.module import LightningSystem, followed_tokenizer, group_config
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.prediction import Generation, continue_prompts
from lightning_embinit.models.tied_lm import split_batch
from lightning_embinit.modules.decoding import eval_mode
from lightning_embinit.text.prompts import prompt_batch
from lightning_embinit.text.tokenization import TokenizerSpec, build_tokenizer

OBJECTIVES = ("causal", "masked")
IGNORE = -100
"""The label of a position without loss (the Hugging Face convention)."""


def language_model_types() -> dict[str, tuple[str, ...]]:
    """Model type → the objectives ``transformers`` has a head for (``causal``, ``masked``)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    heads = (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    return {
        name: tuple(o for o, mapping in zip(OBJECTIVES, heads) if name in mapping)
        for name in sorted(set().union(*heads))
    }


def _read_config_json(config_path: str) -> dict[str, Any]:
    """The mapping in ``config_path``/config.json; a file that is missing, not JSON or not an object: a ValueError
    naming it."""
    file = os.path.join(os.path.expanduser(config_path), "config.json")
    try:
        with open(file, encoding="utf-8") as handle:
            saved = json.load(handle)
    except OSError as error:
        raise ValueError(f"config_path {config_path!r}: no readable config.json ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"config_path {config_path!r}: {file} is not a text file (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"config_path {config_path!r}: {file} is not valid JSON ({error.msg} at line {error.lineno}, column "
            f"{error.colno}); write it with config.save_pretrained(directory)"
        ) from None
    if not isinstance(saved, dict):
        raise ValueError(f"config_path {config_path!r}: {file} holds a JSON {type(saved).__name__}, not an object")
    return saved


def hugging_face_config(
    model_type: str | None, config: Mapping[str, Any], config_path: str | None, defaults: Mapping[str, Any]
) -> Any:
    """The ``transformers`` config of ``model_type`` (or ``config_path``'s ``config.json``), ``config`` on top and
    ``defaults`` for the keys neither sets; a key of ``config`` the config class does not know is refused
    (:func:`~lightning_embinit.checks.check_config_fields`)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if (model_type is None) == (config_path is None):
        raise ValueError("give model_type (e.g. 'gpt2', 'llama', 'bert') or config_path (a directory with config.json)")
    types = language_model_types()
    if config_path is None:
        check_choice("model_type", model_type, types, hint="the model types with a causal or masked LM head")
        check_config_fields(CONFIG_MAPPING[model_type](), config, "HuggingFaceLM config")
        return AutoConfig.for_model(model_type, **{**defaults, **config})
    saved = _read_config_json(config_path)
    check_choice("model_type", saved.get("model_type"), types, hint=f"of {config_path}/config.json")
    check_config_fields(CONFIG_MAPPING[saved["model_type"]](), config, "HuggingFaceLM config")
    path = os.path.expanduser(config_path)
    return AutoConfig.from_pretrained(path, **{**{k: v for k, v in defaults.items() if k not in saved}, **config})


def language_model_objective(config: Any, objective: str | None) -> str:
    """``objective`` (default: masked for a type with a masked-LM head not configured as a decoder, else causal),
    checked against the type's heads; a causal BERT-like config becomes a decoder (else it attends both ways)."""
    heads = language_model_types()[config.model_type]
    decoder = getattr(config, "is_decoder", False)
    objective = objective or ("masked" if "masked" in heads and not decoder else "causal")
    if check_choice("objective", objective, OBJECTIVES) not in heads:
        raise ValueError(
            f"model type {config.model_type!r} has no {objective} LM head in transformers: use objective="
            f"{heads[0]!r}, or a model type with one: "
            + ", ".join(name for name, has in language_model_types().items() if objective in has)
        )
    if objective == "causal" and "masked" in heads:
        config.is_decoder = True
    return objective


def masking(tokenizer: Any, probability: float) -> Any:
    """``transformers``' masking for BERT-style training with a whole pretrained tokenizer."""
    from transformers import DataCollatorForLanguageModeling

    hf = getattr(tokenizer, "hf", None)
    if hf is None or hf.mask_token is None or tokenizer.subset is not None:
        raise ValueError(
            f"objective='masked' needs a whole pretrained tokenizer with a mask token; this {tokenizer.kind} "
            "tokenizer has none"
        )
    return DataCollatorForLanguageModeling(tokenizer=hf, mlm=True, mlm_probability=probability)


class HuggingFaceLM(LightningSystem):
    """A Hugging Face language model built from a config (module docstring), trained with its LM loss.

    Args:
        model_type: a ``transformers`` model type with a causal or masked LM head (``gpt2``, ``llama``, ``bert``…)
        config: config fields on top of the type's defaults (``n_embd``, ``num_hidden_layers``…); ``vocab_size`` and
            the pad/bos/eos ids default to the tokenizer's
        config_path: instead of ``model_type``, a directory with a ``config.json`` (``save_pretrained``'s)
        objective: ``causal`` (next token) or ``masked`` ([MASK] 80 % / random 10 % / kept 10 % of ``mlm_probability``
            of the tokens); default masked for a type with a masked-LM head not configured as a decoder, else causal
        tokenizer: a tokenizer spec (``hf:minilm``, a tokenizer directory, a saved config) — the CLI links the
            datamodule's; kept in the checkpoint and as ``tokenizer``, where ``EmbeddingInitCallback`` finds the tokens
        mlm_probability: the share of tokens the masked objective predicts
        optimizer: :class:`~lightning_embinit.models.optimization.OptimizerConfig` (Adam at 1e-3)

    Batches: ``(inputs, targets)`` (:class:`~lightning_embinit.data.LanguageModelDataModule`'s: targets are the
    next tokens) or a dict with ``input_ids`` (and ``labels``, the next tokens, for ``causal``); masking ignores given
    labels. Logged: ``train_loss``, ``train_loss_epoch``, ``val_loss``, ``val_ppl``, ``test_loss``, ``test_ppl``, as
    :class:`~lightning_embinit.models.TiedEmbeddingLM` logs them.
    """

    def __init__(
        self,
        model_type: str | None = None,
        config: dict[str, Any] | None = None,
        config_path: str | None = None,
        objective: str | None = None,
        tokenizer: TokenizerSpec | None = None,
        mlm_probability: float = 0.15,
        *,
        optimizer: OptimizerConfig = OptimizerConfig(lr=1e-3),
    ) -> None:
        super().__init__()
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

        if tokenizer is None:
            raise ValueError("HuggingFaceLM needs a tokenizer (e.g. 'hf:minilm'; the CLI links the datamodule's)")
        text_tokenizer = build_tokenizer(tokenizer)
        ids = {f"{role}_token_id": text_tokenizer.role_ids[role] for role in ("pad", "bos", "eos")}
        hf_config = hugging_face_config(
            model_type, config or {}, config_path, {"vocab_size": len(text_tokenizer), **ids}
        )
        if hf_config.vocab_size < len(text_tokenizer):
            raise ValueError(
                f"config vocab_size={hf_config.vocab_size} is smaller than the tokenizer's {len(text_tokenizer)} tokens"
                " (leave vocab_size out: it is then the tokenizer's)"
            )
        objective = language_model_objective(hf_config, objective)
        probability = check_range("mlm_probability", mlm_probability, 0, 1, low_open=True, high_open=True)
        self.masking = masking(text_tokenizer, probability) if objective == "masked" else None
        optimizer = group_config(OptimizerConfig, optimizer, "optimizer", OptimizerConfig(lr=1e-3))
        self.optimizer_config = optimizer.resolved(hf_config.hidden_size)
        self.save_hyperparameters(
            {
                "model_type": hf_config.model_type,
                "config": config,
                "config_path": config_path,
                "objective": objective,
                "mlm_probability": mlm_probability,
                "optimizer": asdict(self.optimizer_config),
            }
        )
        # the checkpoint rebuilds the model from the whole config and the tokenizer's own config, with no files
        saved = hf_config.to_diff_dict()
        self.hparams["config"] = {k: v for k, v in saved.items() if k not in ("model_type", "transformers_version")}
        self.hparams["config_path"] = None
        self._set_tokenizer("tokenizer", text_tokenizer)
        auto = AutoModelForCausalLM if objective == "causal" else AutoModelForMaskedLM
        self.model = auto.from_config(hf_config)
        self._add_token_loss_metrics()

    def prepare_vocabulary_change(self, change: Any) -> Callable[[], None]:
        """Follow :func:`~lightning_embinit.init.extension.extend_vocabulary` of the token table: the tokenizer (the
        new one given, checked now, before any weight changes) and the saved config's ``vocab_size``."""
        tokenizer = followed_tokenizer(self.tokenizer, list(change.tokens), change.tokenizer, option="tokenizer")

        def commit() -> None:
            self._set_tokenizer("tokenizer", tokenizer)
            self.hparams["config"] = {**self.hparams["config"], "vocab_size": change.table_rows}

        return commit

    @override
    def forward(self, *inputs: Any, **options: Any) -> Any:
        """The Hugging Face model's forward (its output, with ``logits`` and, given ``labels``, ``loss``)."""
        return self.model(*inputs, **options)

    def language_model_batch(self, batch: Any) -> dict[str, torch.Tensor]:
        """``input_ids`` and ``labels`` (-100 where there is no loss): for ``causal`` the next tokens (padding
        ignored); for ``masked`` the original ids at the masked positions, the inputs masked."""
        if self.masking is None:
            inputs, targets = split_batch(batch)
            return {"input_ids": inputs, "labels": targets.masked_fill(targets == self.tokenizer.pad_id, IGNORE)}
        inputs = batch["input_ids"] if isinstance(batch, Mapping) else batch[0]
        masked, labels = self.masking.torch_mask_tokens(inputs.cpu().clone())  # it draws on the CPU
        return {"input_ids": masked.to(inputs.device), "labels": labels.to(inputs.device)}

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        batch = self.language_model_batch(batch)
        labels = batch["labels"]
        logits = self.model(input_ids=batch["input_ids"]).logits
        # the Hugging Face LM losses: mean cross-entropy over the labels that are not -100 (a causal model's own
        # loss would shift its labels once more: the targets here are the next tokens already, as TiedEmbeddingLM's)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)
        self._log_token_loss(stage, loss, (labels != IGNORE).sum(), labels.shape[0])
        return loss

    # ----------------------------------------------------------------- new text
    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        """The continuations of a prompt batch as records, as :meth:`TiedEmbeddingLM.predict_step
        <lightning_embinit.models.TiedEmbeddingLM.predict_step>` gives them (a causal model only)."""
        return self.continue_batch(batch)

    @torch.no_grad()
    def continue_batch(self, batch: Mapping[str, Any], generation: Generation | None = None) -> list[dict[str, Any]]:
        """The records of a prompt batch (:func:`~lightning_embinit.models.prediction.continue_prompts`) over the
        model's last ``max_position_embeddings`` positions, each continuation detokenized by the tokenizer."""
        if self.hparams.objective != "causal":
            raise ValueError(
                f"generate continues text with a causal language model; this HuggingFaceLM ({self.hparams.model_type})"
                f" was trained with objective={self.hparams.objective!r}: train one with objective='causal'"
            )
        tokenizer = self.tokenizer

        def last_logits(context: list[int]) -> torch.Tensor:
            return self.model(input_ids=torch.tensor([context], device=self.device)).logits[0, -1]

        with eval_mode(self):
            return continue_prompts(
                batch,
                last_logits,
                tokenizer.decode,
                roles=tokenizer.role_ids,
                window=getattr(self.model.config, "max_position_embeddings", None),
                generation=generation or Generation(),
                device=self.device,
            )

    def generate(self, prompts: Sequence[str], **options: Any) -> list[str]:
        """Continue each prompt (encoded by the model's tokenizer) as :meth:`TiedEmbeddingLM.generate
        <lightning_embinit.models.TiedEmbeddingLM.generate>` does (``options``: the fields of
        :class:`~lightning_embinit.models.prediction.Generation`); returns each continuation detokenized."""
        prompts = check_texts(prompts, "generate() prompts")
        batch = prompt_batch(prompts, self.tokenizer.encode)
        return [record["continuation"] for record in self.continue_batch(batch, Generation(**options))]
