"""Alignment of a slot's tokens to a pre-trained table: rules, OOV policies, projections, errors."""

from __future__ import annotations

import gzip
import math
import warnings

import pytest
import torch

from lightning_embinit.init.projection import fit_projection, random_orthogonal_matrix
from lightning_embinit.init.sources import SourceRequest
from lightning_embinit.init.sources.alignment import AlignmentOptions, align_to_slot
from lightning_embinit.init.sources.matching import match_tokens
from lightning_embinit.init.sources.pretrained import ArrayTable, PretrainedSource
from lightning_embinit.init.statistics import matrix_statistics
from tests.shared_data import require_shared_data

SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}


def make_table(tokens, dim=4, special=None, seed=0):
    matrix = torch.randn(len(tokens), dim, generator=torch.Generator().manual_seed(seed))
    return ArrayTable(tokens=list(tokens), matrix=matrix, description="test table", special_tokens=special or {})


def make_request(tokens, dim=4, seed=0, corpus=None, specials=SPECIALS):
    return SourceRequest(
        "enc",
        len(tokens),
        dim,
        tokens=list(tokens),
        special_tokens=dict(specials),
        generator=torch.Generator().manual_seed(seed),
        corpus=corpus,
    )


def align(table, tokens, dim=4, seed=0, corpus=None, **options):
    options.setdefault("min_coverage", 0.0)
    return align_to_slot(
        make_request(tokens, dim, seed, corpus), table, AlignmentOptions(**options), source_name="test"
    )


@pytest.fixture(scope="module")
def glove_table():
    path = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    tokens, rows = [], []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            parts = line.rstrip("\n").split(" ")
            tokens.append(parts[0])
            rows.append([float(v) for v in parts[1:]])
    return ArrayTable(tokens=tokens, matrix=torch.tensor(rows, dtype=torch.float32), description="glove subset")


def test_exact_rows_are_copied_and_provenance_recorded(glove_table):
    tokens = ["<pad>", "<unk>", "<bos>", "<eos>", "man", "horse", "beach", "qqzzxqq"]
    built = align(glove_table, tokens, dim=50, min_coverage=0)
    index = glove_table.lookup()
    for position, token in enumerate(tokens):
        if token in index:
            assert torch.equal(built.weight[position], glove_table.matrix[index[token]])
    assert built.pretrained_rows.tolist() == [False] * 4 + [True] * 3 + [False]
    assert built.coverage.found == 3 and built.coverage.total == 8
    assert built.coverage.by_rule == {"exact": 3}
    assert built.weight.dtype == torch.float32 and built.weight.shape == (8, 50)


def test_fallback_rules_in_order():
    table = make_table(
        ["paris", "ing", "##ed", "▁dog", "cat", "[PAD]", "[UNK]", "[CLS]", "[SEP]", "Apple"], special={"pad": "[PAD]"}
    )
    tokens = ["<pad>", "<unk>", "<bos>", "<eos>", "Paris", "##ing", "ed", "dog", "▁cat", "apple", "APPLE", "zzz"]
    match = match_tokens(tokens, table, slot_special=SPECIALS, options=AlignmentOptions())
    lookup = table.lookup()
    expected = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "paris", "ing", "##ed", "▁dog", "cat", "Apple", "Apple", None]
    assert [lookup.get(e, -1) if e else -1 for e in expected] == match.rows
    assert match.rules == ["special"] * 4 + [
        "lower",
        "wordpiece",
        "wordpiece",
        "sentencepiece",
        "sentencepiece",
        "lower",
        "lower",
        None,
    ]


def test_fallbacks_are_configurable_and_special_map_wins():
    table = make_table(["paris", "</s>", "<s>", "<unk>", "ing"])
    tokens = ["<pad>", "<unk>", "<bos>", "<eos>", "Paris", "##ing"]
    exact_only = match_tokens(tokens, table, slot_special=SPECIALS, options=AlignmentOptions(fallbacks=()))
    assert exact_only.rules == [None, "exact", None, None, None, None]
    options = AlignmentOptions.pop_from({"fallbacks": "lower", "special_map": {"eos": "<s>", "<bos>": "</s>"}})
    match = match_tokens(tokens, table, slot_special=SPECIALS, options=options)
    assert match.rows == [-1, 3, 1, 2, 0, -1]
    assert match.rules == [None, "exact", "special_map", "special_map", "lower", None]
    with pytest.raises(ValueError, match="no token 'nope'"):
        align(table, tokens, special_map={"pad": "nope"})


@pytest.mark.parametrize("policy", ["normal:0.01", "xavier", "zeros", "mean", "match"])
def test_oov_policies(glove_table, policy):
    tokens = ["man", "woman", "dog", "horse", "street", "zzq1", "zzq2", "zzq3", "zzq4", "zzq5"] * 1
    built = align(glove_table, tokens, dim=50, oov=policy, seed=3)
    found, oov = built.weight[:5], built.weight[5:]
    assert torch.isfinite(built.weight).all()
    if policy == "zeros":
        assert torch.count_nonzero(oov) == 0
    elif policy == "mean":
        assert torch.allclose(oov, found.double().mean(0).float().expand_as(oov))
    elif policy == "match":
        stats = matrix_statistics(found)
        sample = align(glove_table, tokens[:5] + [f"zz{i}" for i in range(4000)], dim=50, oov="match").weight[5:]
        assert matrix_statistics(sample).mean == pytest.approx(stats.mean, abs=0.01)
        assert matrix_statistics(sample).std == pytest.approx(stats.std, rel=0.02)
    elif policy == "normal:0.01":
        big = align(glove_table, tokens[:5] + [f"zz{i}" for i in range(4000)], dim=50).weight[5:]
        assert matrix_statistics(big).std == pytest.approx(0.01, rel=0.02)
    elif policy == "xavier":
        n = len(tokens)
        assert oov.abs().max() <= math.sqrt(6 / (n + 50)) + 1e-6
    again = align(glove_table, tokens, dim=50, oov=policy, seed=3)
    assert torch.equal(built.weight, again.weight), "deterministic given the generator"


def test_bad_options_raise():
    with pytest.raises(ValueError, match="oov"):
        AlignmentOptions(oov="bogus")
    with pytest.raises(ValueError, match="min_coverage"):
        AlignmentOptions(min_coverage=2)
    with pytest.raises(ValueError, match="project"):
        AlignmentOptions(project="svd")
    with pytest.raises(ValueError, match="fallback"):
        AlignmentOptions(fallbacks=("stem",))


def test_zero_coverage_names_source_and_slot(glove_table):
    with pytest.raises(ValueError, match=r"source 'test' covers none of the 3 tokens of slot 'enc'"):
        align(glove_table, ["qq1", "qq2", "qq3"], dim=50)


def test_low_coverage_warns_with_numbers_and_missing_by_corpus_frequency(glove_table):
    tokens = ["man", "zzb", "zza", "zzc"]
    corpus = lambda: [["zza", "man", "zzc"], ["zzc", "zzc", "zza"]]  # noqa: E731
    with pytest.warns(UserWarning, match=r"covers 1 of 4 tokens \(25.0%\).*min_coverage=0.5"):
        built = align(glove_table, tokens, dim=50, corpus=corpus, min_coverage=0.5)
    assert built.coverage.missing == ["zzc", "zza", "zzb"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        no_corpus = align(glove_table, tokens, dim=50, min_coverage=0.2)
    assert no_corpus.coverage.missing == ["zzb", "zza", "zzc"]


def test_tokens_required_for_pretrained_sources(glove_table):
    source = PretrainedSource("glove-test", lambda request: glove_table)
    request = SourceRequest("enc", 5, 50, tokens=None)
    with pytest.raises(ValueError, match="aligns rows by token string, but slot 'enc' has none") as error:
        source.build(request)
    for way in ("EmbeddingHost.embedding_slots()", "tokens=", "vocabulary_for(slot)", "model a `vocabulary` attribute"):
        assert way in str(error.value)


def test_non_finite_source_rows_raise():
    table = make_table(["a", "b", "c"])
    table.matrix[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"NaN/inf.*\['b'\]"):
        align(table, ["a", "b"])
    assert align(table, ["a", "c"]).coverage.found == 2  # unused bad rows do not matter


def test_dimension_mismatch_error_names_both(glove_table):
    with pytest.raises(ValueError, match=r"D_s=50 but slot 'enc' has embedding_dim D=32.*project='pca'"):
        align(glove_table, ["man", "dog"], dim=32)


def test_pca_projection_keeps_top_variance(glove_table):
    words = [t for t in glove_table.tokens[:3000]]
    built = align(glove_table, words, dim=10, project="pca")
    assert built.weight.shape == (3000, 10)
    projected = built.weight.double()
    assert torch.allclose(projected.mean(0), torch.zeros(10, dtype=torch.float64), atol=1e-4)
    variances = projected.var(0, unbiased=False)
    assert torch.all(variances[:-1] >= variances[1:] - 1e-6), "axes ordered by variance"
    original = glove_table.matrix[:3000].double()
    eigenvalues = torch.linalg.eigvalsh(torch.cov(original.T, correction=0)).flip(0)
    assert variances.sum().item() == pytest.approx(eigenvalues[:10].sum().item(), rel=1e-4)
    assert "pca 50→10" in built.description
    with pytest.raises(ValueError, match="D_s > D"):
        align(glove_table, words[:10], dim=64, project="pca")


@pytest.mark.parametrize("target", [80, 20])
def test_random_orthogonal_projection(glove_table, target):
    words = glove_table.tokens[:500]
    built = align(glove_table, words, dim=target, project="random_orthogonal", seed=1)
    x = glove_table.matrix[:500].double()
    y = built.weight.double()
    if target >= 50:
        assert torch.allclose(y @ y.T, x @ x.T, atol=1e-3), "inner products preserved when D ≥ D_s"
    else:  # a random subspace: squared norms shrink by D/D_s in expectation (isotropic data)
        table = make_table([f"w{i}" for i in range(2000)], dim=50, seed=5)
        y = align(table, table.tokens, dim=target, project="random_orthogonal", seed=1).weight.double()
        ratio = (y.norm(dim=1) ** 2).sum().item() / (table.matrix.double().norm(dim=1) ** 2).sum().item()
        assert ratio == pytest.approx(target / 50, rel=0.05)
    again = align(glove_table, words, dim=target, project="random_orthogonal", seed=1)
    assert torch.equal(built.weight, again.weight)
    other = align(glove_table, words, dim=target, project="random_orthogonal", seed=2)
    assert not torch.equal(built.weight, other.weight)


def test_same_width_is_not_projected(glove_table):
    built = align(glove_table, ["man", "dog"], dim=50, project="random_orthogonal")
    assert torch.equal(built.weight[0], glove_table.matrix[glove_table.lookup()["man"]])


def test_random_orthogonal_matrix_shapes():
    wide = random_orthogonal_matrix(3, 7, torch.Generator().manual_seed(0))
    assert wide.shape == (3, 7) and torch.allclose(wide @ wide.T, torch.eye(3, dtype=torch.float64), atol=1e-12)
    narrow = random_orthogonal_matrix(7, 3, torch.Generator().manual_seed(0))
    assert narrow.shape == (7, 3) and torch.allclose(narrow.T @ narrow, torch.eye(3, dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError, match="unknown projection"):
        fit_projection("lda", torch.zeros(3, 3), 2)


def test_oov_statistics_count_each_found_slot_row():
    table = ArrayTable(["a", "b"], torch.tensor([[0.0, 0.0], [3.0, 3.0]]), "two rows")
    built = align(table, ["a", "A", "b", "zz"], dim=2, oov="mean")
    assert built.weight[3].tolist() == [1.0, 1.0]  # (0 + 0 + 3) / 3: "a" is used twice
    assert built.weight[:3].tolist() == [[0, 0], [0, 0], [3, 3]]


def test_case_insensitive_match_takes_the_first_source_row_whatever_the_lookup_order():
    from itertools import permutations

    tokens = ["Paris", "PARIS", "PaRiS"]
    matrix = torch.arange(3, dtype=torch.float32).unsqueeze(1)
    for order in permutations(range(3)):  # a tokenizer's get_vocab() order varies between processes
        index = {tokens[row]: row for row in order}
        table = ArrayTable(tokens=tokens, matrix=matrix, description="cased", index=index)
        built = align(table, ["pARIS", "paris"], dim=1)
        assert built.weight.flatten().tolist() == [0.0, 0.0], order
        assert built.coverage.by_rule == {"lower": 2}


def test_the_fallback_rules_in_their_order():
    from lightning_embinit.init.sources.matching import FALLBACK_RULES

    assert FALLBACK_RULES == ("special", "lower", "wordpiece", "sentencepiece", "pieces", "ngrams")
