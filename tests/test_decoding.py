"""Greedy and beam search: beam 1 = greedy, cached = uncached, beam = exhaustive search, BLEU = sacrebleu."""

import itertools

import pytest
import sacrebleu
import torch

from lightning_embinit.models import (
    CorpusBLEU,
    ReinforcedTransformerSeq2Seq,
    TransformerSeq2Seq,
    beam_search,
    greedy_decode,
)
from tests.translation_helpers import TINY, TINY_REINFORCED, multi30k_lines, settings

MODELS = {
    "baseline": lambda **o: TransformerSeq2Seq(**TINY, **o),
    "reinforced-causal": lambda **o: ReinforcedTransformerSeq2Seq(**TINY_REINFORCED, **o),
    "reinforced-sequence": lambda **o: ReinforcedTransformerSeq2Seq(
        **settings(TINY_REINFORCED, architecture={"target_normalization": "sequence"}), **o
    ),
}


def model_and_source(name, tgt_vocab_size=40, seed=0):
    torch.manual_seed(seed)
    model = MODELS[name](src_vocab_size=30, tgt_vocab_size=tgt_vocab_size).eval()
    src = torch.randint(4, 30, (6, 7))
    src[2:, 5:] = 0
    src[2:, 4] = 3
    net = model.model  # the plain-torch encoder–decoder the decoders run
    with torch.no_grad():  # a peaked output layer, and an eos bias that ends about half the sentences early
        net.head.proj.weight.mul_(8.0)
        state, prefix, margins = net.encode(src), torch.full((6, 1), net.bos_id), []
        for _ in range(12):
            logits = net.next_token_logits(prefix, state, None)
            logits[:, [net.pad_id, net.bos_id, net.eos_id]] = float("-inf")
            margins.append(logits.max(-1).values - net.next_token_logits(prefix, state, None)[:, net.eos_id])
            prefix = torch.cat((prefix, logits.argmax(-1, keepdim=True)), dim=1)
        middle = torch.stack(margins).min(0).values.sort().values[2:4]
        net.head.proj.bias[net.eos_id] += middle.mean()  # between two rows' margins: no ties
    return model, src


@pytest.mark.parametrize("name", MODELS)
def test_beam_one_is_greedy_and_the_cache_changes_nothing(name):
    model, src = model_and_source(name)
    greedy = greedy_decode(model.model, src, max_len=12)
    assert torch.equal(beam_search(model.model, src, beam_size=1, max_len=12), greedy)
    assert torch.equal(greedy_decode(model.model, src, max_len=12, use_cache=False), greedy)
    beam = beam_search(model.model, src, beam_size=4, max_len=12, length_penalty=0.6)
    assert torch.equal(
        beam_search(model.model, src, beam_size=4, max_len=12, length_penalty=0.6, use_cache=False), beam
    )
    eos_rows = (greedy == model.model.eos_id).any(1)
    assert 0 < eos_rows.sum() < len(greedy)  # some rows stop early, others run to max_len
    for row in greedy.tolist():  # eos ends a row, pad fills the rest; pad and bos are never generated
        if model.model.eos_id in row:
            assert set(row[row.index(model.model.eos_id) + 1 :]) <= {model.model.pad_id}
        assert (
            model.model.bos_id not in row
            and model.model.pad_id not in row[: row.index(model.model.eos_id) if model.model.eos_id in row else None]
        )


@pytest.mark.parametrize("name", ["baseline", "reinforced-causal"])
def test_cached_steps_attend_without_a_padding_mask(name):
    model, src = model_and_source(name)
    masks = []
    for layer in model.model.decoder.layers:
        layer.self_attn.register_forward_pre_hook(
            lambda module, args, kwargs: masks.append(kwargs["key_padding_mask"]), with_kwargs=True
        )
    cached = greedy_decode(model.model, src, max_len=6)
    assert len(masks) == 6 * len(model.model.decoder.layers) and all(
        mask is None for mask in masks
    )  # SDPA's unmasked path
    masks.clear()
    assert torch.equal(greedy_decode(model.model, src, max_len=6, use_cache=False), cached)
    assert masks and all(mask is not None for mask in masks)  # the whole prefix, recomputed: its padding masked


def _sequence_scores(model, src, hypotheses, penalty):
    """log p(y | x) / |y|^penalty of every hypothesis, in one padded forward pass."""
    width = max(map(len, hypotheses))
    tokens = torch.full((len(hypotheses), width + 1), model.model.pad_id)
    for row, hypothesis in enumerate(hypotheses):
        tokens[row, : len(hypothesis) + 1] = torch.tensor([model.model.bos_id] + hypothesis)
    with torch.no_grad():
        logits = model(src.expand(len(hypotheses), -1), tokens[:, :-1]).float()
    logits[..., [model.model.pad_id, model.model.bos_id]] = float("-inf")
    log_probs = logits.log_softmax(-1)
    scores = {}
    for row, hypothesis in enumerate(hypotheses):
        total = log_probs[row, torch.arange(len(hypothesis)), torch.tensor(hypothesis)].sum().item()
        scores[tuple(hypothesis)] = total / len(hypothesis) ** penalty
    return scores


@pytest.mark.parametrize("penalty", [0.0, 1.0])
@pytest.mark.parametrize("name", ["baseline", "reinforced-causal"])
def test_a_wide_beam_finds_the_exhaustive_best(name, penalty):
    model, src = model_and_source(name, tgt_vocab_size=6, seed=1)
    outputs = [1, 3, 4, 5]  # unk, eos and two words; pad and bos are never generated
    max_len = 3
    candidates = [list(p) for n in range(1, max_len + 1) for p in itertools.product(outputs, repeat=n)]
    candidates = [
        c for c in candidates if model.model.eos_id not in c[:-1] and (c[-1] == model.model.eos_id or len(c) == max_len)
    ]
    found = beam_search(model.model, src, beam_size=64, max_len=max_len, length_penalty=penalty)
    for row in range(src.shape[0]):
        scores = _sequence_scores(model, src[row : row + 1], candidates, penalty)
        best = max(scores, key=scores.get)
        hypothesis = [t for t in found[row].tolist() if t != model.model.pad_id]
        assert scores[tuple(hypothesis)] == pytest.approx(scores[best], abs=1e-5), (row, hypothesis, best)


def test_decoding_settings_are_checked():
    model, src = model_and_source("baseline")
    with pytest.raises(ValueError, match="beam_size must be ≥ 1"):
        beam_search(model.model, src, beam_size=0, max_len=5)
    with pytest.raises(ValueError, match="max_len must be ≥ 1"):
        greedy_decode(model.model, src, max_len=0)
    assert model.generate(src, max_len=3).shape == (6, 3)
    assert model.decode_length(src) == 24  # max_decode_len of TINY


def test_corpus_bleu_over_batches_equals_sacrebleu_on_real_multi30k():
    references = multi30k_lines("val", "en", 300)
    hypotheses = []
    for i, line in enumerate(references):  # real sentences, damaged in different ways
        words = line.split()
        if i % 3 == 0:
            words = words[: max(1, len(words) * 2 // 3)]
        elif i % 3 == 1:
            words = words[1:] + words[:1]
        else:
            words = multi30k_lines("test_2016_flickr", "en", 1, start=i)[0].split()
        hypotheses.append(" ".join(words))
    metric = CorpusBLEU()
    for start in range(0, 300, 37):
        metric.update(hypotheses[start : start + 37], references[start : start + 37])
    expected = sacrebleu.corpus_bleu(hypotheses, [references])
    assert metric.compute().item() == pytest.approx(expected.score, abs=1e-4)
    assert 10 < expected.score < 90
    direct = sacrebleu.BLEU()
    direct.corpus_score(hypotheses, [references])
    assert metric.signature == str(direct.get_signature()) and "tok:13a" in metric.signature
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        metric.update(["a", "b"], ["a"])
