"""Tiny tokenizers and models for the transplant tests: byte-level BPE (GPT-2's spelling), SentencePiece-style BPE
(``▁``) and WordPiece (``##``) trained in milliseconds on a few sentences, and a LLaMA of width 16."""

from __future__ import annotations

import torch
import transformers as T

END = "<|endoftext|>"
ENGLISH = [
    "a man rides a skate board on the side walk",
    "two dogs run on the side walk near the water",
    "a woman in a red shirt sits on a bench",
    "the children play with a ball in the park",
] * 5
GERMAN = [
    "ein mann fährt auf dem bürgersteig skateboard",
    "zwei hunde laufen auf dem bürgersteig am wasser",
    "eine frau in einem roten hemd sitzt auf einer bank",
    "die kinder spielen mit einem ball im park",
] * 5


def byte_level(texts: list[str], size: int = 120, special: tuple[str, ...] = (END,)) -> T.PreTrainedTokenizerFast:
    """Byte-level BPE of ``size`` tokens (the bytes the texts hold, then merges), ``<|endoftext|>`` as bos, eos and
    unk (GPT-2's way)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=list(special), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return T.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=END, eos_token=END, unk_token=END)


def sentencepiece_style(texts: list[str], size: int = 80) -> T.PreTrainedTokenizerFast:
    """BPE with SentencePiece's ``▁`` word starts and ``<s> </s> <unk> <pad>`` (LLaMA's, no byte fallback)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=size, special_tokens=["<unk>", "<s>", "</s>", "<pad>"], show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return T.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def wordpiece(texts: list[str], size: int = 80) -> T.PreTrainedTokenizerFast:
    """BERT-style WordPiece (``##`` continuations, ``[PAD] [UNK] [CLS] [SEP] [MASK]``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=size, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return T.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def tiny_llama(vocab_size: int, *, tied: bool = False, seed: int = 0, **config) -> T.LlamaForCausalLM:
    torch.manual_seed(seed)
    settings = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": None, **config}
    return T.LlamaForCausalLM(
        T.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
            tie_word_embeddings=tied,
            **settings,
        )
    ).eval()


def vocabulary(tokenizer) -> list[str]:
    """Token strings by id."""
    tokens = [""] * len(tokenizer)
    for token, index in tokenizer.get_vocab().items():
        tokens[index] = token
    return tokens
