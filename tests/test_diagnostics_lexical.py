"""``lexical_probe`` on the real GloVe subset and standard test sets ([K] Table 4, docs/concepts.md#lexical-probes)."""

import pytest
import torch

from lightning_embinit.diagnostics import CHAINS, lexical_probe
from lightning_embinit.diagnostics.lexical import format_probe, is_syntactic, single_threaded_blas
from tests.shared_data import require_shared_data


@pytest.fixture(scope="module")
def glove():
    from gensim.models import KeyedVectors

    path = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    return KeyedVectors.load_word2vec_format(str(path), binary=False)


@pytest.fixture(scope="module")
def lexical():
    return {
        name: str(require_shared_data("lexical", name))
        for name in ("questions-words.txt", "wordsim353.tsv", "simlex999.txt")
    }


def test_raw_chain_reproduces_gensim_exactly(glove, lexical):
    results = lexical_probe(
        torch.from_numpy(glove.vectors),
        glove.index_to_key,
        analogies=lexical["questions-words.txt"],
        similarity=[lexical["wordsim353.tsv"], lexical["simlex999.txt"]],
        chains=["raw"],
    )
    raw = results["raw"]
    with single_threaded_blas():  # gensim's own run, only faster
        score, sections = glove.evaluate_word_analogies(lexical["questions-words.txt"])
    assert raw["analogy"] == score  # exactly gensim's own accuracy
    assert raw["analogy_count"] == 19544  # every question is covered by the subset
    semantic = [s for s in sections[:-1] if not is_syntactic(s["section"])]
    correct = sum(len(s["correct"]) for s in semantic)
    count = correct + sum(len(s["incorrect"]) for s in semantic)
    assert raw["analogy_semantic_count"] == count == 8869 and raw["analogy_syntactic_count"] == 10675
    assert raw["analogy_semantic"] == correct / count
    for name, file in (("wordsim353", "wordsim353.tsv"), ("simlex999", "simlex999.txt")):
        _, spearman, _ = glove.evaluate_word_pairs(lexical[file])
        assert raw["similarity"][name] == spearman.statistic
    assert raw["similarity_count"] == {"wordsim353": 353, "simlex999": 999}


def test_positions_hurt_standardized_vectors_more_than_raw_ones(glove, lexical):
    """The direction of [K] Table 4: standardized + PE scores below raw + PE; scaling changes no cosine."""
    results = lexical_probe(
        torch.from_numpy(glove.vectors),
        glove.index_to_key,
        analogies=lexical["questions-words.txt"],
        similarity=[lexical["wordsim353.tsv"]],
        max_analogies=1500,
        seed=0,
    )
    assert set(results) == {
        "raw",
        "scaled",
        "raw+pe",
        "standardized",
        "standardized+scaled",
        "standardized+pe",
        "raw+pe_scaled",
    }
    assert all(result["analogy_count"] == 1500 for result in results.values())
    assert results["scaled"]["analogy"] == results["raw"]["analogy"] > 0.4
    assert results["standardized+pe"]["analogy"] < results["raw+pe"]["analogy"] < results["raw"]["analogy"]
    assert results["standardized+pe"]["similarity"]["wordsim353"] < results["raw+pe"]["similarity"]["wordsim353"]
    # P·σ_p/σ_x on the raw vectors is the balance of standardized + PE: the same collapse
    assert results["raw+pe_scaled"]["analogy"] == pytest.approx(results["standardized+pe"]["analogy"], abs=0.01)
    assert "standardized+pe" in format_probe(results)


def test_random_positions_come_from_the_seed(glove, lexical):
    matrix, tokens = torch.from_numpy(glove.vectors[:3000]), glove.index_to_key[:3000]
    options = dict(similarity=[lexical["wordsim353.tsv"]], chains=["raw+pe"])
    state = torch.get_rng_state()
    first = lexical_probe(matrix, tokens, seed=1, **options)
    assert torch.equal(torch.get_rng_state(), state)
    assert first == lexical_probe(matrix, tokens, seed=1, **options)
    assert first != lexical_probe(matrix, tokens, seed=2, **options)
    assert first["raw+pe"]["analogy"] is None and first["raw+pe"]["analogy_count"] == 0


def test_a_vocabulary_without_any_question_scores_none(lexical):
    """A sampled analogy file (max_analogies) with no in-vocabulary question: None and 0, not gensim's
    ZeroDivisionError."""
    tokens = ["der", "die", "das", "hund", "katze", "mann", "frau", "king", "queen"]  # mostly German: no whole question
    matrix = torch.randn(len(tokens), 8, generator=torch.Generator().manual_seed(0))
    for limit in (50, None):
        result = lexical_probe(
            matrix,
            tokens,
            analogies=lexical["questions-words.txt"],
            similarity=[lexical["wordsim353.tsv"]],
            chains=["raw"],
            max_analogies=limit,
        )["raw"]
        assert (result["analogy"], result["analogy_count"], result["analogy_semantic"]) == (None, 0, None)
        assert result["similarity_count"]["wordsim353"] == 1  # king–queen


def test_padding_like_rows_and_repeated_tokens(lexical):
    tokens = ["<pad>", "king", "queen", "man", "woman", "king"]
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(6, 8, generator=generator)
    matrix[0] = 0  # no direction: left out instead of breaking gensim's cosine
    result = lexical_probe(matrix, tokens, similarity=[lexical["wordsim353.tsv"]], chains=["raw"])["raw"]
    assert (
        result["similarity_count"]["wordsim353"] == 2
    )  # king–queen and man–woman; the repeated "king" keeps its first row
    assert result["similarity"]["wordsim353"] is not None


def test_bad_input_is_named(glove, lexical):
    matrix, tokens = torch.zeros(3, 4), ["a", "b", "c"]
    with pytest.raises(ValueError, match="unknown lexical chain 'raw\\+noise'; known lexical chains: raw, raw\\+pe"):
        lexical_probe(matrix, tokens, analogies=lexical["questions-words.txt"], chains=["raw", "raw+noise"])
    with pytest.raises(ValueError, match="analogy file not found"):
        lexical_probe(matrix, tokens, analogies="/no/such/questions.txt")
    with pytest.raises(ValueError, match="needs an analogy file"):
        lexical_probe(matrix, tokens)
    with pytest.raises(ValueError, match="one row per token"):
        lexical_probe(matrix, tokens[:2], similarity=[lexical["wordsim353.tsv"]])
    with pytest.raises(ValueError, match="positional encoding of shape"):
        lexical_probe(matrix, tokens, similarity=[lexical["wordsim353.tsv"]], positional=torch.zeros(5, 3))
    assert "standardized+scaled+pe" in CHAINS and "scaled+pe" in CHAINS
