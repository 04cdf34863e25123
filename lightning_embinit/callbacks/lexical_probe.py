"""``LexicalProbe``: word analogy and similarity of a word-level slot at the start and end of training.

A thin adapter over :func:`lightning_embinit.diagnostics.lexical_probe` ([K] Table 4, [KB] §5); the PCA scatter of
chosen words is [KB] Fig. 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_embinit.callbacks.loggers import figure_loggers, log_figure, log_scalars
from lightning_embinit.callbacks.strategies import tables_ready
from lightning_embinit.callbacks.summary import MONITORS
from lightning_embinit.diagnostics.figures import pca_scatter
from lightning_embinit.diagnostics.lexical import (
    DEFAULT_CHAINS,
    check_chains,
    format_probe,
    lexical_probe,
    vocabulary_coverage,
)
from lightning_embinit.diagnostics.lexical_files import check_probe_inputs, probe_words
from lightning_embinit.diagnostics.variance import no_positions_note, positional_matrix, token_rows
from lightning_embinit.init.freezing import measured_slots
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.sharding import whole_slot
from lightning_embinit.init.tokens import resolve_slot_tokens
from lightning_embinit.init.transforms import StatisticsTarget
from lightning_embinit.text_files import check_encoding, gensim_test_data

#: The words of the PCA scatter when ``words=`` is not given (those in the vocabulary are drawn).
DEFAULT_WORDS = tuple(
    "man woman king queen boy girl father mother france paris germany berlin italy rome dog cat horse red blue green "
    "walk walking run running".split()
)


class LexicalProbe(Callback):
    """Run :func:`~lightning_embinit.diagnostics.lexical_probe` on a word-level slot at train start and end.

    Args:
        analogies: an analogy file (questions-words layout). With neither this nor ``similarity``,
            gensim's bundled ``questions-words.txt`` and ``wordsim353.tsv`` are used.
        similarity: word-similarity files (``word1<TAB>word2<TAB>rating``).
        slot: the slot to probe. Default: the slot with token strings; among several, the one whose vocabulary
            holds the most distinct test-set words (the first on a tie; ``probed_slot``, logged): on a de→en
            translation model, ``tgt``.
        chains: chain names (:data:`~lightning_embinit.diagnostics.lexical.CHAINS`).
        words: the words of the PCA scatter (those in the vocabulary; default :data:`DEFAULT_WORDS`).
        max_analogies: evaluate a seeded sample of this many in-vocabulary questions (None: all).
        standardize_to: the target of the ``standardized`` chains (Xavier for the slot's shape).
        seed: the seed of the random positional rows and of the question sample.
        encoding: the text encoding of the analogy and similarity files (read, and checked, when the callback is made).

    Logged on global rank zero (docs/diagnostics.md): ``{prefix}/{slot}/{chain}/analogy`` (``analogy_semantic``,
    ``analogy_syntactic``) and ``{prefix}/{slot}/{chain}/similarity/{name}`` to every logger; the table as text and
    the PCA scatter (raw x, and s · x + P as the first layer sees them) to TensorBoard loggers. A model that adds no
    positions to the token vectors (rotary, ALiBi, relative-bias) skips the chains with + P and logs
    ``{prefix}/{slot}/no_additive_positional_encoding`` = 1. ``results`` (``{"start": ..., "end": ...}``) is
    checkpointed and starts afresh at every ``fit``; :meth:`summary` holds the latest probe's values.
    """

    summary_key = MONITORS

    def __init__(
        self,
        analogies: str | None = None,
        similarity: Sequence[str] | None = None,
        slot: str | None = None,
        chains: Sequence[str] = DEFAULT_CHAINS,
        words: Sequence[str] | None = None,
        max_analogies: int | None = 2000,
        standardize_to: StatisticsTarget = "xavier",
        seed: int = 0,
        figures: bool = True,
        verbose: bool = True,
        prefix: str = "lexical",
        encoding: str = "utf-8",
    ) -> None:
        if analogies is None and not similarity:  # the standard test sets that gensim ships
            analogies, similarity = gensim_test_data("questions-words.txt"), [gensim_test_data("wordsim353.tsv")]
        similarity = [similarity] if isinstance(similarity, str) else list(similarity or [])
        try:
            check_probe_inputs(analogies, similarity, max_analogies)
            self.test_words = probe_words(analogies, similarity, encoding=check_encoding(encoding))
        except ValueError as error:
            raise ValueError(f"LexicalProbe: {error}") from None
        self.encoding = encoding
        self.analogies = analogies
        self.similarity = similarity
        self.slot = slot
        self.chains = check_chains(chains)
        self.words = tuple(DEFAULT_WORDS if words is None else words)
        self.max_analogies = max_analogies
        self.standardize_to = standardize_to
        self.seed = seed
        self.figures = figures
        self.verbose = verbose
        self.prefix = prefix
        self.results: dict[str, dict[str, Any]] = {}
        self.probed_slot: str | None = None
        self.slot_coverage: dict[str, int] = {}
        self.skipped_chains: tuple[str, ...] = ()
        self._announced = False

    @override
    @property
    def state_key(self) -> str:
        return self._generate_state_key(slot=self.slot, prefix=self.prefix)

    def _slot(self, pl_module: torch.nn.Module, datamodule: Any = None) -> EmbeddingSlot:
        """The probed slot (see ``slot``), its token strings found as EmbeddingInitCallback finds them
        (host, datamodule, model); sets ``probed_slot`` and, for a choice among several, ``slot_coverage``."""
        slots = select_slots(pl_module, None if self.slot is None else [self.slot])
        if self.slot is None:
            slots, _ = measured_slots(pl_module, slots)  # a frozen teacher beside the student is left out
        worded = [resolve_slot_tokens(s, datamodule=datamodule, model=pl_module)[0] for s in slots.values()]
        worded = [s for s in worded if s.tokens is not None]
        if not worded:
            raise ValueError(
                f"LexicalProbe needs a slot with token strings; {', '.join(slots)} of {type(pl_module).__name__} "
                "carry none: return them from embedding_slots() (EmbeddingSlot.tokens), use a datamodule with a "
                "`vocabulary` attribute or a `vocabulary_for(slot)` method, or give the model a `vocabulary` attribute"
            )
        if len(worded) == 1:
            chosen, self.slot_coverage = worded[0], {}
        else:
            self.slot_coverage = {s.name: vocabulary_coverage(s.tokens, self.test_words) for s in worded}
            chosen = max(worded, key=lambda s: self.slot_coverage[s.name])  # the first of equals
        self.probed_slot = chosen.name
        return chosen

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # a new fit starts a new record; Lightning restores a resumed run's after setup (load_state_dict)
        self.results = {}
        self._announced = False
        if tables_ready(pl_module, None if self.slot is None else [self.slot]):  # else: configure_model makes them
            self._announce(self._slot(pl_module, getattr(trainer, "datamodule", None)))

    def _announce(self, slot: EmbeddingSlot) -> None:
        """Say which slot is probed when it was chosen among several (once per fit)."""
        self._announced = True
        if self.slot_coverage:
            covered = ", ".join(f"{name!r} {count}" for name, count in self.slot_coverage.items())
            rank_zero_info(
                f"LexicalProbe: probing slot {slot.name!r}, the vocabulary with the most test-set words "
                f"({covered} of {len(self.test_words)}); choose another with slot="
            )

    def probe(self, pl_module: torch.nn.Module, datamodule: Any = None) -> dict[str, dict[str, Any]]:
        """The probe of the slot's current table (padding row and its token left out); every rank must call it
        when the table is sharded (it is gathered)."""
        return self._probe_slot(whole_slot(self._slot(pl_module, datamodule)))

    @torch.no_grad()
    def _probe_slot(self, slot: EmbeddingSlot) -> dict[str, dict[str, Any]]:
        token_rows(slot)  # checks the table is whole on this process
        positional = positional_matrix(slot)
        chains = self.chains
        self.skipped_chains = ()
        if positional is None and (slot.family is not None or slot.positional_encoding is not None):
            self.skipped_chains = tuple(chain for chain in chains if "+pe" in chain)  # the model adds no P
            chains = tuple(chain for chain in chains if "+pe" not in chain)
        rows = [row for row in range(len(slot.tokens)) if row != slot.padding_idx]  # rows past the tokens have no word
        matrix = slot.weight.detach()[torch.tensor(rows, device=slot.weight.device)]
        return lexical_probe(
            matrix,
            [slot.tokens[row] for row in rows],
            analogies=self.analogies,
            similarity=self.similarity,
            chains=chains,
            input_scale=float(slot.input_scale),
            positional=positional,
            standardize_to=self.standardize_to,
            seed=self.seed,
            max_analogies=self.max_analogies,
            encoding=self.encoding,
        )

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule, when: str) -> None:
        if when == "start" and "start" in self.results:
            return  # a resumed run keeps the start of the first (every rank restored the same results)
        slot = self._slot(pl_module, getattr(trainer, "datamodule", None))
        if not self._announced:
            self._announce(slot)
        slot = whole_slot(slot)  # on every rank: gathering a sharded table is a collective
        if not trainer.is_global_zero:
            return
        results = self._probe_slot(slot)
        self.results[when] = results
        step = trainer.global_step
        log_scalars(trainer, self._scalars(slot.name, results), step)
        table = format_probe(results)
        if self.skipped_chains:
            table += f"\n{', '.join(self.skipped_chains)}: not measured, {no_positions_note(slot)}"
        if self.verbose:
            rank_zero_info(f"LexicalProbe, slot {slot.name!r}, train {when} (step {step}):\n{table}")
        for logger in figure_loggers(trainer):
            logger.experiment.add_text(
                f"{self.prefix}/{slot.name}/{when}", "    " + table.replace("\n", "\n    "), step
            )
        if self.figures and figure_loggers(trainer):
            self._log_scatter(trainer, slot, when, step)

    def _scalars(self, slot: str, results: dict[str, dict[str, Any]], suffix: str = "") -> dict[str, float]:
        """The accuracies and ρ of a probe as logged, ``{prefix}/{slot}/{chain}/...`` (None left out), each name
        followed by ``suffix``."""
        scalars: dict[str, float] = {}
        for chain, result in results.items():
            base = f"{self.prefix}/{slot}/{chain}"
            for key in ("analogy", "analogy_semantic", "analogy_syntactic"):
                if result[key] is not None:
                    scalars[f"{base}/{key}{suffix}"] = result[key]
            scalars |= {f"{base}/similarity/{n}{suffix}": v for n, v in result["similarity"].items() if v is not None}
        if self.skipped_chains and not suffix:
            scalars[f"{self.prefix}/{slot}/no_additive_positional_encoding"] = 1.0
        return scalars

    def summary(self) -> dict[str, float]:
        """The latest probe's values (train end, else start), named as logged, then those of the probe at train
        start (``..._at_start``: [K] Table 4 probes the table as it starts)."""
        start, latest = self.results.get("start"), self.results.get("end") or self.results.get("start")
        if latest is None or self.probed_slot is None:
            return {}
        return {**self._scalars(self.probed_slot, latest), **self._scalars(self.probed_slot, start or {}, "_at_start")}

    def _log_scatter(self, trainer: L.Trainer, slot: EmbeddingSlot, when: str, step: int) -> None:
        index = {token: row for row, token in enumerate(slot.tokens)}
        words = [word for word in self.words if word in index and index[word] != slot.padding_idx]
        if len(words) < 3:
            return
        rows = torch.tensor([index[word] for word in words])
        vectors = slot.weight.detach()[rows.to(slot.weight.device)].to("cpu", torch.float32)
        panels = {"raw x": vectors}
        positional = positional_matrix(slot)
        if positional is not None:
            generator = torch.Generator().manual_seed(self.seed)
            positions = torch.randint(0, positional.shape[0], (len(words),), generator=generator)
            panels["s·x + P (first-layer input)"] = (
                vectors * float(slot.input_scale) + positional.to("cpu", torch.float32)[positions]
            )
        figure = pca_scatter(panels, words, title=f"slot {slot.name!r}, train {when} (step {step})")
        log_figure(trainer, f"{self.prefix}/{slot.name}/pca_{when}", figure, step)

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module, "start")

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module, "end")

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"results": self.results}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.results = dict(state_dict.get("results", {}))
