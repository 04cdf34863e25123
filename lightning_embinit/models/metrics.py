"""The systems' own metrics: :class:`PerplexityFromLoss`, and :class:`CorpusBLEU`, corpus BLEU as sacrebleu computes
it, accumulated over batches and processes (issue 8 §2).

sacrebleu's corpus BLEU depends on the corpus only through sums of statistics: hypothesis and reference lengths,
matched and total n-grams for n = 1 … 4. Each batch's unsmoothed statistics are added to an integer state (summed
across ranks), and :meth:`CorpusBLEU.compute` scores the sums once with ``BLEU.compute_bleu``, so the result equals
``sacrebleu.corpus_bleu`` on the whole corpus, in float64, for every batching.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from sacrebleu.metrics import BLEU
from torchmetrics import Metric
from torchmetrics.aggregation import MeanMetric

from lightning_embinit.checks import check_choice


class PerplexityFromLoss(MeanMetric):
    """exp of the token-weighted mean cross-entropy: update with (mean loss, token count)."""

    def compute(self) -> torch.Tensor:
        return super().compute().exp()


class CorpusBLEU(Metric):
    """sacrebleu corpus BLEU (default: 13a tokenization, mixed case, exp smoothing) as a torchmetrics Metric.

    ``update(hypotheses, references)`` takes detokenized strings, one reference per hypothesis. ``smooth_method``:
    ``none``, ``floor``, ``add-k``, ``exp``; ``smooth_value``: ``None`` for sacrebleu's default (0.1, 1).
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(
        self,
        *,
        tokenize: str = "13a",
        lowercase: bool = False,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        check_choice("smooth_method=", smooth_method, BLEU.SMOOTH_DEFAULTS)
        self.bleu = BLEU(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method, smooth_value=smooth_value)
        self.bleu.num_refs = 1  # what sacrebleu records when it scores: one reference per hypothesis (the signature's)
        self.counter = BLEU(tokenize=tokenize, lowercase=lowercase, smooth_method="none")  # statistics, unsmoothed
        self.order = self.bleu.max_ngram_order
        self.add_state("statistics", torch.zeros(2 + 2 * self.order, dtype=torch.long), dist_reduce_fx="sum")

    @property
    def signature(self) -> str:
        """sacrebleu's signature, e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``."""
        return str(self.bleu.get_signature())

    def update(self, hypotheses: Sequence[str], references: Sequence[str]) -> None:
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
        if not hypotheses:
            return
        score = self.counter.corpus_score(list(hypotheses), [list(references)])
        batch = torch.tensor([score.sys_len, score.ref_len, *score.counts, *score.totals], dtype=torch.long)
        self.statistics += batch.to(self.statistics.device)

    def compute(self) -> torch.Tensor:
        stats = self.statistics.tolist()
        score = self.bleu.compute_bleu(
            correct=stats[2 : 2 + self.order],
            total=stats[2 + self.order :],
            sys_len=stats[0],
            ref_len=stats[1],
            smooth_method=self.bleu.smooth_method,
            smooth_value=self.bleu.smooth_value,
            effective_order=self.bleu.effective_order,
            max_ngram_order=self.order,
        )
        return torch.tensor(score.score, dtype=torch.float64)
