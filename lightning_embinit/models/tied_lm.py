"""The tied-embedding language model of [S] as a Lightning system: the architecture
:class:`~lightning_embinit.architectures.CausalLM` (a causal pre-LN transformer with a configurable, tied or
untied, output head) with its vocabulary, next-token loss and perplexity.

With ``zero_init_residual=True`` a tied model starts as the bigram p(j | i) ∝ exp(ŵ_i · w_j), and its initial
loss is about ln(e^{dσ} + n − 1) for N(0, σ²) embeddings ([S]; docs/concepts.md#tied-head);
:meth:`TiedEmbeddingLM.initial_loss_prediction` gives the estimate for every head
(:class:`~lightning_embinit.callbacks.InitialLossMonitor` compares it with the measured loss).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from typing_extensions import override

from lightning_embinit.architectures.causal_lm import CausalLM
from lightning_embinit.architectures.config import CausalLMConfig
from lightning_embinit.checks import check_texts
from lightning_embinit.models.module import EmbinitModule
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.prediction import Generation, continue_prompts
from lightning_embinit.modules.decoding import eval_mode
from lightning_embinit.text.prompts import prompt_batch
from lightning_embinit.text.text_tokenizer import WordTokenizer
from lightning_embinit.vocabulary import Vocabulary


def split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) from a ``(inputs, targets)`` pair or a dict with ``input_ids`` and ``labels``/``targets``."""
    if isinstance(batch, Mapping):
        targets = batch.get("labels", batch.get("targets"))
        if "input_ids" not in batch or targets is None:
            raise ValueError("a dict batch needs 'input_ids' and 'labels' (or 'targets')")
        return batch["input_ids"], targets
    inputs, targets = batch
    return inputs, targets


class TiedEmbeddingLM(EmbinitModule):
    """Causal transformer LM over ``vocabulary`` (token strings, saved with the model) or ``vocab_size``;
    ``special_tokens`` (default: the package's ``<pad>``, ``<unk>``, ``<bos>``, ``<eos>`` found in the vocabulary)
    name the padding row and the ``tokens`` slot's special tokens. ``architecture``:
    :class:`~lightning_embinit.architectures.CausalLMConfig` (``embedding_init``: any scheme name, e.g.
    ``normal:0.0625``, until :class:`~lightning_embinit.callbacks.EmbeddingInitCallback` replaces it);
    ``optimizer``: :class:`~lightning_embinit.models.optimization.OptimizerConfig` (Adam at 1e-3).
    """

    architecture_config = CausalLMConfig
    model: CausalLM

    def __init__(
        self,
        vocabulary: list[str] | None = None,
        vocab_size: int | None = None,
        special_tokens: dict[str, str] | None = None,
        *,
        architecture: CausalLMConfig = CausalLMConfig(),
        optimizer: OptimizerConfig = OptimizerConfig(lr=1e-3),
    ) -> None:
        super().__init__()
        tokens = None if vocabulary is None else [str(t) for t in vocabulary]
        if tokens is not None:
            if vocab_size is not None and vocab_size != len(tokens):
                raise ValueError(f"vocab_size={vocab_size} disagrees with a vocabulary of {len(tokens)} tokens")
            vocab_size = len(tokens)
        if vocab_size is None or vocab_size < 2:
            raise ValueError("TiedEmbeddingLM needs a vocabulary (list of token strings) or vocab_size ≥ 2")
        config = self._configure(
            architecture, optimizer, own={"vocab_size": vocab_size, "special_tokens": special_tokens}
        )
        self.hparams["vocabulary"] = tokens  # a plain list whatever sequence was given; reloads with the checkpoint
        self.vocabulary = tokens
        vocab = (
            Vocabulary.sized(vocab_size, special_tokens=special_tokens)
            if tokens is None
            else Vocabulary.from_tokens(tokens, special_tokens)
        )
        self.special_tokens = dict(vocab.special_tokens)
        self.model = CausalLM(config, vocab)
        self._add_token_loss_metrics()

    def output_states(self, batch: Any) -> torch.Tensor:
        """The (K, D) states that meet the output matrix at the batch's non-padding positions."""
        inputs, _ = split_batch(batch)
        states = self.model.output_states(inputs)
        return states[inputs != self.model.padding_idx] if self.model.padding_idx is not None else states.flatten(0, 1)

    @override
    def _follow_vocabulary(self, change: Any, vocab: Vocabulary) -> Callable[[], None]:
        def follow() -> None:
            self.vocabulary = list(change.tokens)
            self.special_tokens = dict(vocab.special_tokens)
            self.hparams["vocabulary"] = list(change.tokens)
            self.hparams["vocab_size"] = len(change.tokens)

        return follow

    @override
    @classmethod
    def checkpoint_vocabularies(cls, hparams: Mapping[str, Any]) -> dict[str, tuple[list[str] | None, Any]]:
        vocabulary = hparams.get("vocabulary")
        return {"tokens": (None if vocabulary is None else [str(t) for t in vocabulary], None)}

    def initial_loss_prediction(self, length: int | None = None) -> float | None:
        """[S]'s expected initial loss from the current weights (:meth:`CausalLM.initial_loss_prediction`)."""
        return self.model.initial_loss_prediction(length)

    def initial_loss_probe(self, length: int | None = None, **options: int) -> float:
        """The loss on random tokens, from the model's own forward (:meth:`CausalLM.initial_loss_probe`)."""
        return self.model.initial_loss_probe(length, **options)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy over non-padding targets."""
        ignore = -100 if self.model.padding_idx is None else self.model.padding_idx
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore)

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        inputs, targets = split_batch(batch)
        loss = self.loss(self(inputs), targets)
        pad = self.model.padding_idx  # the count stays on the device: no sync per step
        count = torch.tensor(targets.numel(), device=loss.device) if pad is None else (targets != pad).sum()
        self._log_token_loss(stage, loss, count, inputs.shape[0])
        return loss

    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        """The continuations of a prompt batch (:mod:`lightning_embinit.text.prompts`) as records (``index``,
        ``prompt``, ``continuation``: :mod:`lightning_embinit.models.prediction`), with the :class:`Generation`
        defaults (greedy, up to 20 tokens)."""
        return self.continue_batch(batch)

    @torch.no_grad()
    def continue_batch(self, batch: Mapping[str, Any], generation: Generation | None = None) -> list[dict[str, Any]]:
        """The records of a prompt batch (:func:`~lightning_embinit.models.prediction.continue_prompts`): each
        prompt read after ``<eos>`` and continued over the model's last ``max_len`` positions, its new tokens joined
        by spaces (evaluation mode)."""
        vocab = self.model.vocab

        def last_logits(context: list[int]) -> torch.Tensor:
            return self(torch.tensor([context], device=self.device))[0, -1]

        with eval_mode(self):
            return continue_prompts(
                batch,
                last_logits,
                lambda ids: " ".join(vocab.decode(ids)),
                roles=vocab.special_ids,
                window=self.model.config.max_len,
                generation=generation or Generation(),
                device=self.device,
            )

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 20,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int = 0,
        ban_unk: bool = False,
        tokenize: Callable[[str], list[str]] | None = None,
    ) -> list[str]:
        """Continue each prompt, split by ``tokenize`` (default: lowercased regex words, as
        :class:`~lightning_embinit.data.LanguageModelDataModule` splits): :meth:`continue_batch` with these
        :class:`~lightning_embinit.models.prediction.Generation` options (prompt k samples with the seed ``seed + k``;
        a blank prompt gets ``""``). Returns each continuation's tokens joined by spaces."""
        prompts = check_texts(prompts, "generate() prompts")
        generation = Generation(max_new_tokens, temperature, top_k, seed, ban_unk)
        tokenize = WordTokenizer() if tokenize is None else tokenize
        batch = prompt_batch(prompts, lambda text: self.model.vocab.encode(tokenize(text)))
        return [record["continuation"] for record in self.continue_batch(batch, generation)]
