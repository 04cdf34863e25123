"""What both translation systems share (docs/concepts.md#kim-testbed, #reinforced-training): :class:`Seq2SeqModule`
holds an encoder–decoder (:class:`~lightning_embinit.architectures.encoder_decoder.Seq2SeqArchitecture`) as
``self.model`` and owns the two sides' tokenizers (saved in the hyperparameters), masked cross-entropy, loss and
corpus BLEU, decoding (:mod:`~lightning_embinit.modules.decoding`), ``translate``/``predict_step``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_embinit.architectures.encoder_decoder import Seq2SeqArchitecture
from lightning_embinit.checks import (
    check_choice,
    check_finite,
    check_non_negative_int,
    check_positive_int,
    check_probability,
    check_texts,
)
from lightning_embinit.models.metrics import CorpusBLEU
from lightning_embinit.models.module import EmbinitModule, saved_tokenizer, side_vocabulary
from lightning_embinit.models.prediction import batch_indices, in_order, is_blank
from lightning_embinit.modules.decoding import beam_search, eval_mode, greedy_decode
from lightning_embinit.text.batches import pad_sequences

BLEU_REFERENCES = ("tokenizer", "raw")
"""What BLEU scores the detokenized hypotheses against: ``tokenizer`` — each reference as the target
tokenizer round-trips it (``tgt_tokenizer.reference``: lowercased and split for word level), so a
perfect model scores 100; ``raw`` — the reference text as the data gives it (published BLEU's way)."""


def split_translation_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None, list[str] | None]:
    """(src, tgt, tgt_text) from a TranslationDataModule dict, a ``(src, tgt)`` pair or a bare ``src``."""
    if isinstance(batch, Mapping):
        if "src" not in batch:
            raise ValueError(f"a translation batch needs 'src' (and 'tgt'); got keys {sorted(batch)}")
        return batch["src"], batch.get("tgt"), batch.get("tgt_text")
    if isinstance(batch, torch.Tensor):
        return batch, None, None
    return batch[0], batch[1], None


def check_decoding(
    beam_size: Any, length_penalty: Any, max_len: Any, *, optional: bool = False, max_len_name: str = "max_len"
) -> None:
    """Raise ValueError unless ``beam_size`` ≥ 1 and ``length_penalty`` is finite (or None, the model's setting,
    when ``optional``), and ``max_len`` ≥ 1 or None."""
    check_positive_int("beam_size", beam_size, optional=optional)
    check_finite("length_penalty", length_penalty, optional=optional)
    check_positive_int(max_len_name, max_len, optional=True)


class Seq2SeqModule(EmbinitModule):
    """Shared base of the translation systems (module docstring); a subclass names its :attr:`architecture_class`
    and :attr:`~EmbinitModule.architecture_config` and gives the defaults.

    ``label_smoothing`` (training loss only); decoding for BLEU and ``predict``: greedy, or beam search with
    ``beam_size`` and ``length_penalty``, at most ``max_decode_len`` tokens (default source length + 50, capped at
    ``max_len``); ``bleu_every_n_validations``: BLEU on every N-th validation in fit, 0 = only in ``validate``/``test``
    runs; ``bleu_references``: :data:`BLEU_REFERENCES`.
    """

    architecture_class: ClassVar[type[Seq2SeqArchitecture]]
    model: Seq2SeqArchitecture

    def __init__(
        self,
        src_tokenizer: dict | None = None,
        tgt_tokenizer: dict | None = None,
        src_vocab_size: int | None = None,
        tgt_vocab_size: int | None = None,
        *,
        architecture: Any,
        optimizer: Any,
        label_smoothing: float = 0.0,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_decode_len: int | None = None,
        bleu_every_n_validations: int = 1,
        bleu_references: str = "tokenizer",
    ) -> None:
        super().__init__()
        check_choice("bleu_references", bleu_references, BLEU_REFERENCES)
        check_non_negative_int("bleu_every_n_validations", bleu_every_n_validations)
        check_probability("label_smoothing", label_smoothing)
        check_decoding(beam_size, length_penalty, max_decode_len, max_len_name="max_decode_len")
        own = {
            "src_vocab_size": src_vocab_size,
            "tgt_vocab_size": tgt_vocab_size,
            "label_smoothing": label_smoothing,
            "beam_size": beam_size,
            "length_penalty": length_penalty,
            "max_decode_len": max_decode_len,
            "bleu_every_n_validations": bleu_every_n_validations,
            "bleu_references": bleu_references,
        }
        config = self._configure(architecture, optimizer, own=own)
        src_tokenizer, src_vocab = side_vocabulary("src", src_tokenizer, src_vocab_size)
        tgt_tokenizer, tgt_vocab = side_vocabulary("tgt", tgt_tokenizer, tgt_vocab_size)
        self._set_tokenizer("src_tokenizer", src_tokenizer)
        self._set_tokenizer("tgt_tokenizer", tgt_tokenizer)
        self._add_token_loss_metrics()
        self.val_bleu, self.test_bleu = CorpusBLEU(), CorpusBLEU()
        self._validation_runs = 0
        self._bleu_this_run = False
        self._signature_logged = False
        self._warned: set[str] = set()
        self.model = self.architecture_class(config, src_vocab, tgt_vocab)

    # ----------------------------------------------------------------- loss
    def teacher_forced_loss(
        self, src: torch.Tensor, tgt: torch.Tensor, *, label_smoothing: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean cross-entropy over the non-pad targets tgt[:, 1:] given tgt[:, :-1], and their count; the output
        layer runs on the non-pad positions only."""
        targets, model = tgt[:, 1:], self.model
        hidden = model.decode(tgt[:, :-1], model.encode(src))
        keep = targets != model.pad_id
        if bool(keep.all()):  # no padding: skip the gather (the check costs what the gather's own sync would)
            hidden, targets = hidden.flatten(0, 1), targets.flatten()
        else:
            hidden, targets = hidden[keep], targets[keep]
        logits = model.head_logits(hidden)
        return F.cross_entropy(logits, targets, label_smoothing=label_smoothing), keep.sum()

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of (B, T, V) logits against (B, T) targets (padding ignored, label smoothing)."""
        return F.cross_entropy(
            logits.flatten(0, 1),
            targets.flatten(),
            ignore_index=self.model.pad_id,
            label_smoothing=self.hparams.label_smoothing,
        )

    # ----------------------------------------------------------------- vocabulary extension
    def output_states(self, batch: Any) -> torch.Tensor:
        """The (K, width) states that meet the output matrix at the batch's non-padding target positions."""
        src, tgt, _ = split_translation_batch(batch)
        if tgt is None:
            raise ValueError("output_states needs a batch with targets ('tgt')")
        return self.model.output_states(src, tgt[:, :-1])[tgt[:, 1:] != self.model.pad_id]

    @override
    def _follow_vocabulary(self, change: Any, vocab: Any) -> Callable[[], None]:
        sides = {"src": ("src",), "tgt": ("tgt",), "shared": ("src", "tgt")}[change.slot]
        return self._follow_tokenizers(change, [f"{side}_tokenizer" for side in sides])

    @override
    @classmethod
    def checkpoint_vocabularies(cls, hparams: Mapping[str, Any]) -> dict[str, tuple[list[str] | None, Any]]:
        found = {side: saved_tokenizer(hparams.get(f"{side}_tokenizer")) for side in ("src", "tgt")}
        return {"shared": found["src"]} if hparams.get("architecture", {}).get("share_embeddings") else found

    # ----------------------------------------------------------------- Lightning steps
    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        src, tgt, _ = split_translation_batch(batch)
        loss, count = self.teacher_forced_loss(src, tgt, label_smoothing=self.hparams.label_smoothing)
        self._log_token_loss("train", loss, count, src.shape[0])
        return loss

    @override
    def setup(self, stage: str) -> None:
        self._signature_logged = False  # once per fit/validate/test run: each run's logger gets the signature

    @override
    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        every = self.hparams.bleu_every_n_validations
        if self.trainer.sanity_checking:
            self._bleu_this_run = False
        elif self.trainer.state.fn != "fit":  # a validate() call: always BLEU ("at the end" = validate after fit)
            self._bleu_this_run = True
        else:
            self._validation_runs += 1
            self._bleu_this_run = every > 0 and self._validation_runs % every == 0

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._evaluate(batch, "val", with_bleu=self._bleu_this_run)

    @override
    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._evaluate(batch, "test", with_bleu=True)

    def _evaluate(self, batch: Any, prefix: str, *, with_bleu: bool) -> torch.Tensor:
        src, tgt, tgt_text = split_translation_batch(batch)
        if tgt is None:
            raise ValueError(f"{prefix} batches need targets ('tgt')")
        loss, count = self.teacher_forced_loss(src, tgt, label_smoothing=0.0)
        self._log_token_loss(prefix, loss, count, src.shape[0])
        if with_bleu and self._can_score(tgt_text):
            bleu = getattr(self, f"{prefix}_bleu")
            bleu.update(self._detokenize(self.generate(src)), self._references(tgt_text))
            self.log(f"{prefix}_bleu", bleu, prog_bar=prefix == "val", on_epoch=True, batch_size=src.shape[0])
            self._log_signature(bleu)
        return loss

    def _can_score(self, tgt_text: list[str] | None) -> bool:
        reason = None
        if self.tgt_tokenizer is None:
            reason = "the model has no target tokenizer (tgt_tokenizer) to detokenize hypotheses"
        elif tgt_text is None:
            reason = "the batches carry no 'tgt_text' references (use TranslationDataModule)"
        if reason is not None and reason not in self._warned:
            self._warned.add(reason)
            rank_zero_warn(f"BLEU is not computed: {reason}")
        return reason is None

    def _references(self, tgt_text: list[str]) -> list[str]:
        if self.hparams.bleu_references == "raw":
            return list(tgt_text)
        return [self.tgt_tokenizer.reference(text) for text in tgt_text]

    def bleu_references_description(self) -> str:
        """What BLEU's references are (``bleu_references``), e.g. ``tokenizer round-trip (word, lowercased)``."""
        if self.hparams.bleu_references == "raw":
            return "raw target text"
        tokenizer = self.tgt_tokenizer
        if tokenizer is None:
            return "tokenizer round-trip (no target tokenizer)"
        lowercased = tokenizer.reference("A") == "a"
        return f"tokenizer round-trip ({tokenizer.kind}{', lowercased' if lowercased else ''})"

    def _log_signature(self, bleu: CorpusBLEU) -> None:
        """Once per fit/validate/test run: sacrebleu's signature and what the references are."""
        if self._signature_logged:
            return
        self._signature_logged = True
        references = self.bleu_references_description()
        rank_zero_info(f"BLEU: sacrebleu corpus BLEU, signature {bleu.signature}, references: {references}")
        if self.logger is not None:
            self.logger.log_hyperparams({"bleu_signature": bleu.signature, "bleu_references": references})

    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        """The translations of the batch's ``src`` as records (``index``, ``source``, ``translation``:
        :mod:`lightning_embinit.models.prediction`), decoded with the model's settings (:meth:`translate_batch`)."""
        return self.translate_batch(batch)

    # ----------------------------------------------------------------- decoding
    def _detokenize(self, ids: torch.Tensor) -> list[str] | list[list[int]]:
        tokenizer = self.tgt_tokenizer
        rows = ids.tolist()
        if tokenizer is None:
            eos = self.model.eos_id
            return [row[: row.index(eos)] if eos in row else row for row in rows]
        return [tokenizer.decode(row) for row in rows]

    def decode_length(self, src: torch.Tensor) -> int:
        """Most tokens to generate: ``max_decode_len``, else source length + 50; at most ``max_len``."""
        wanted = self.hparams.max_decode_len
        return max(1, min(src.shape[1] + 50 if wanted is None else wanted, self.model.config.max_len))

    @torch.no_grad()
    def generate(
        self,
        src: torch.Tensor,
        *,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_len: int | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """(B, S) source ids → (B, L) output ids (greedy for beam 1; None: the hyperparameter's value)."""
        check_decoding(beam_size, length_penalty, max_len, optional=True)
        beam_size = self.hparams.beam_size if beam_size is None else beam_size
        max_len = self.decode_length(src) if max_len is None else max_len
        if beam_size == 1:
            return greedy_decode(self.model, src, max_len=max_len, use_cache=use_cache)
        length_penalty = self.hparams.length_penalty if length_penalty is None else length_penalty
        return beam_search(
            self.model, src, beam_size=beam_size, max_len=max_len, length_penalty=length_penalty, use_cache=use_cache
        )

    @torch.no_grad()
    def translate_batch(
        self,
        batch: Any,
        *,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_len: int | None = None,
    ) -> list[dict[str, Any]]:
        """Records of a batch (a TranslationDataModule dict, a ``(src, tgt)`` pair or bare ``src``): each row's
        ``index`` (the batch's, else its position), ``source`` (its ``src_text``, else None) and ``translation``
        (detokenized; token ids without a target tokenizer). A row whose source text is blank is not decoded: its
        translation is ``""`` (evaluation mode; None: the hyperparameter's setting)."""
        src, _, _ = split_translation_batch(batch)
        texts = batch.get("src_text") if isinstance(batch, Mapping) else None
        texts = [None] * src.shape[0] if texts is None else list(texts)
        outputs: list[Any] = [""] * src.shape[0]
        run = [row for row, text in enumerate(texts) if not is_blank(text)]
        if run:
            with eval_mode(self):
                ids = self.generate(src[run], beam_size=beam_size, length_penalty=length_penalty, max_len=max_len)
            for row, output in zip(run, self._detokenize(ids)):
                outputs[row] = output
        rows = batch_indices(batch, src.shape[0])
        return [{"index": i, "source": t, "translation": o} for i, t, o in zip(rows, texts, outputs)]

    def translate(
        self,
        texts: Sequence[str],
        *,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_len: int | None = None,
        batch_size: int = 64,
    ) -> list[str]:
        """Translate raw source sentences with the model's own tokenizers (evaluation mode, hyperparameter defaults):
        the ``translation`` of each record of :meth:`translate_texts`; a blank sentence gives ``""``."""
        records = self.translate_texts(
            texts, beam_size=beam_size, length_penalty=length_penalty, max_len=max_len, batch_size=batch_size
        )
        return [record["translation"] for record in records]

    def translate_texts(
        self,
        texts: Sequence[str],
        *,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_len: int | None = None,
        batch_size: int = 64,
    ) -> list[dict[str, Any]]:
        """The records of :meth:`translate_batch` for raw source sentences, in their order: each encoded by the
        source tokenizer (at most ``max_len`` − 1 tokens, then eos, as TranslationDataModule's batches), batched
        by length, ``batch_size`` at a time."""
        source, target = self.src_tokenizer, self.tgt_tokenizer
        if source is None or target is None:
            raise ValueError(
                "translate() needs the model's src_tokenizer and tgt_tokenizer (give them at construction)"
            )
        texts = check_texts(texts, "translate() texts")
        check_decoding(beam_size, length_penalty, max_len, optional=True)
        check_positive_int("batch_size", batch_size)
        limit = self.model.config.max_len
        encoded = [ids[: limit - 1] + [source.eos_id] for ids in source.encode_batch(texts)]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        records = []
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = {
                "src": pad_sequences([encoded[i] for i in chunk], source.pad_id).to(self.device),
                "src_text": [texts[i] for i in chunk],
                "index": torch.tensor(chunk),
            }
            records += self.translate_batch(batch, beam_size=beam_size, length_penalty=length_penalty, max_len=max_len)
        return in_order(records, len(texts))
