"""The models of ``bench_transplant.py``, built once and cached under ``benchmarks/.cache/transplant`` (git-ignored):

- tokenizer A: byte-level BPE (4,096 tokens) on English text (Multi30k's English captions and SST-2's sentences);
- the base model: a LLaMA-shaped causal LM (d = 256, 2 layers, 4 heads, untied head) trained on that text with A;
- tokenizer B: byte-level BPE (4,096 tokens) on Multi30k's German captions (the new language);
- the donor: the same shape trained with B on the first half of the German captions (the methods that need a model
  that speaks B: ``omp``, mergekit-tokensurgeon's).

Each is a ``save_pretrained`` directory with its tokenizer beside it. Fine-tuning reads the other half of the German
captions; bits per byte are measured on Multi30k's German validation captions.
"""

from __future__ import annotations

import gzip
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from data_files import shared_file

CACHE = Path(__file__).resolve().parent / ".cache" / "transplant"
SHAPE = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4}
SEQ_LEN, BATCH = 64, 16
END = "<|endoftext|>"


def lines(*parts: str) -> list[str]:
    with gzip.open(shared_file(*parts), "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle if line.strip()]


def english() -> list[str]:
    sst = [line.split("\t")[0] for line in lines("sst2", "train.tsv.gz")[1:]]
    return lines("multi30k", "train.en.gz") + sst


def german_halves() -> tuple[list[str], list[str]]:
    """(the donor's German text, the fine-tuning text): the two halves of Multi30k's German training captions."""
    german = lines("multi30k", "train.de.gz")
    return german[: len(german) // 2], german[len(german) // 2 :]


def held_out() -> list[str]:
    return lines("multi30k", "val.de.gz")


def train_tokenizer(texts: list[str], size: int):
    """A byte-level BPE tokenizer (GPT-2's spelling) of ``size`` tokens, ``<|endoftext|>`` as bos, eos and unk."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size, special_tokens=[END], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=END, eos_token=END, unk_token=END)


def token_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """Every text's ids followed by ``<|endoftext|>``, in one long tensor."""
    end = tokenizer.convert_tokens_to_ids(END)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return torch.tensor([i for line in ids for i in [*line, end]], dtype=torch.long)


def new_model(vocab_size: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=SEQ_LEN,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
        **SHAPE,
    )
    return LlamaForCausalLM(config)


def train(model, stream: torch.Tensor, steps: int, *, lr: float, seed: int, log: str = "", after=None) -> None:
    """``steps`` AdamW steps on random windows of ``stream`` (BATCH × SEQ_LEN), cosine decay after 10 % warm-up;
    ``after(step)`` is called after each step (the model back in training mode afterwards)."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    )
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        offsets = torch.randint(0, len(stream) - SEQ_LEN - 1, (BATCH,), generator=generator)
        batch = torch.stack([stream[o : o + SEQ_LEN + 1] for o in offsets.tolist()])
        logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if log and (step + 1) % 100 == 0:
            print(f"  {log}: step {step + 1}/{steps}, loss {loss.item():.3f}, {time.perf_counter() - start:.0f} s")
        if after is not None:
            after(step + 1)
            model.train()
    model.eval()


@torch.no_grad()
def bits_per_byte(model, tokenizer, texts: list[str]) -> float:
    """Σ −log₂ p over every token of every text and its closing ``<|endoftext|>`` (the line end), each text after
    ``<|endoftext|>``, divided by the texts' UTF-8 bytes plus one per line end: comparable across tokenizers."""
    end = tokenizer.convert_tokens_to_ids(END)
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    total_nats, total_bytes = 0.0, sum(len(t.encode("utf-8")) + 1 for t in texts)
    model.eval()
    for start in range(0, len(encoded), 64):
        rows = [[end, *ids[: SEQ_LEN - 1], end][: SEQ_LEN + 1] for ids in encoded[start : start + 64]]
        width = max(map(len, rows))
        batch = torch.full((len(rows), width), end, dtype=torch.long)
        mask = torch.zeros(len(rows), width - 1, dtype=torch.bool)
        for row, ids in enumerate(rows):
            batch[row, : len(ids)] = torch.tensor(ids)
            mask[row, : len(ids) - 1] = True
        logits = model(input_ids=batch[:, :-1]).logits.float()
        losses = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")
        total_nats += float(losses[mask].sum())
    return total_nats / math.log(2) / total_bytes


def build(name: str, make) -> Path:
    """``CACHE/name``, made by ``make(directory)`` unless it is there already."""
    directory = CACHE / name
    if not (directory / "config.json").exists() and not (directory / "tokenizer.json").exists():
        directory.mkdir(parents=True, exist_ok=True)
        make(directory)
    return directory


def models(base_steps: int = 800, donor_steps: int = 400) -> dict[str, Path]:
    """The cached directories (module doc), built on first use: ``base``, ``donor``, ``tokenizer_b``."""
    from transformers import AutoTokenizer

    donor_text, _ = german_halves()
    tok_a = build("tokenizer_a", lambda d: train_tokenizer(english(), 4096).save_pretrained(d))
    tok_b = build("tokenizer_b", lambda d: train_tokenizer(lines("multi30k", "train.de.gz"), 4096).save_pretrained(d))

    def pretrain(directory: Path, tokenizer_dir: Path, texts: list[str], steps: int, seed: int) -> None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        model = new_model(len(tokenizer), seed)
        train(model, token_stream(tokenizer, texts), steps, lr=3e-3, seed=seed, log=directory.name)
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)

    base = build("base", lambda d: pretrain(d, tok_a, english(), base_steps, 0))
    donor = build("donor", lambda d: pretrain(d, tok_b, donor_text, donor_steps, 1))
    return {"base": base, "donor": donor, "tokenizer_b": tok_b}
