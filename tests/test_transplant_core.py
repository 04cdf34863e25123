"""The transplant's parts against independent computations: spellings and matching on hand-built vocabularies,
sparsemax against its definition (the Euclidean projection onto the simplex, found by bisection), orthogonal
matching pursuit against a loop over numpy's least squares, and each method's rows against a hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_embinit.init.transplant import MATCH_KINDS, match_vocabularies, orthogonal_matching_pursuit, sparsemax
from lightning_embinit.init.transplant.conventions import (
    BYTE_LEVEL,
    SENTENCEPIECE,
    WORD,
    WORDPIECE,
    byte_characters,
    canonical_form,
    detect_convention,
    token_text,
)
from lightning_embinit.init.transplant.methods import MEAN, MethodRequest, resolve_method
from lightning_embinit.init.transplant.plan import combine, table_numbers
from lightning_embinit.init.transplant.spaces import StaticSpace


def test_the_byte_alphabet_is_gpt2s_bijection():
    chars = byte_characters()
    assert len(set(chars.values())) == 256 and chars[ord(" ")] == "Ġ" and chars[ord("\n")] == "Ċ"
    assert chars[ord("a")] == "a" and chars[0xC3] == "Ã" and chars[0xA4] == "¤"  # 'ä' is b'\xc3\xa4' → 'Ã¤'


@pytest.mark.parametrize(
    ("token", "convention", "form"),
    [
        ("Ġmann", BYTE_LEVEL, (True, b"mann")),
        ("ann", BYTE_LEVEL, (False, b"ann")),
        ("ĠfÃ¤hrt", BYTE_LEVEL, (True, "fährt".encode())),
        ("Ã", BYTE_LEVEL, (False, b"\xc3")),
        ("▁mann", SENTENCEPIECE, (True, b"mann")),
        ("<0xC3>", SENTENCEPIECE, (False, b"\xc3")),
        ("mann", WORDPIECE, (True, b"mann")),
        ("##ann", WORDPIECE, (False, b"ann")),
        ("▁mann", WORDPIECE, (True, b"mann")),
        ("mann", WORD, (True, b"mann")),
    ],
)
def test_canonical_forms_across_spellings(token, convention, form):
    assert canonical_form(token, convention) == form


def test_token_text_decodes_bytes_and_marks_word_starts_for_byte_level_splitters():
    assert token_text("ĠfÃ¤hrt", BYTE_LEVEL, leading_space=True) == " fährt"
    assert token_text("ĠfÃ¤hrt", BYTE_LEVEL, leading_space=False) == "fährt"
    assert token_text("##ann", WORDPIECE, leading_space=True) == "ann"


def test_the_spelling_of_a_vocabulary_is_detected():
    assert detect_convention(["<s>", "Ġthe", "the", "a", "Ġa"], ["<s>"]) == BYTE_LEVEL
    assert detect_convention(["▁the", "the", "a", "▁a", "<0x0A>"]) == SENTENCEPIECE
    assert detect_convention(["[CLS]", "the", "##s", "a"], ["[CLS]"]) == WORDPIECE
    assert detect_convention(["the", "cat", "sat"]) == WORD


def test_matching_across_spellings_by_kind():
    """Hand-built: a SentencePiece old vocabulary, a byte-level new one."""
    old = ["<unk>", "<s>", "</s>", "▁mann", "ann", "▁Hund", "<0xC3>", "▁the"]
    new = ["<|endoftext|>", "Ġmann", "ann", "Ġhund", "Ã", "Ġcat", "<unk>", "Ġthe", "the"]
    match = match_vocabularies(
        old,
        new,
        old_special={"unk": "<unk>", "bos": "<s>", "eos": "</s>"},
        new_special={"bos": "<|endoftext|>", "eos": "<|endoftext|>"},
        kinds=MATCH_KINDS,
    )
    assert match.old_convention == SENTENCEPIECE and match.new_convention == BYTE_LEVEL
    assert match.source_ids.tolist() == [2, 3, 4, 5, 6, -1, 0, 7, -1]  # '<|endoftext|>' is eos and bos: eos first
    assert match.kinds == ["special", "normalized", "exact", "case", "normalized", None, "exact", "normalized", None]
    assert match.counts == {"special": 1, "exact": 2, "normalized": 3, "case": 1}
    assert match.unmatched == [5, 8]


def test_case_is_matched_only_when_asked_for():
    assert match_vocabularies(["▁Mann"], ["Ġmann"]).source_ids.tolist() == [-1]
    assert match_vocabularies(["▁Mann"], ["Ġmann"], kinds=MATCH_KINDS).kinds == ["case"]


def test_matching_kinds_can_be_narrowed():
    match = match_vocabularies(["▁a", "b"], ["Ġa", "b", "ĠA"], kinds=("exact",))
    assert match.source_ids.tolist() == [-1, 1, -1]
    with pytest.raises(ValueError, match="unknown match kind"):
        match_vocabularies(["a"], ["a"], kinds=("exact", "fuzzy"))


def simplex_projection(z: np.ndarray) -> np.ndarray:
    """argmin_p ‖p − z‖² over the simplex: p = max(z − τ, 0) with Σ p = 1, τ found by bisection (not the sort)."""
    low, high = z.min() - 1.0, z.max()
    for _ in range(200):
        tau = (low + high) / 2
        low, high = (tau, high) if np.maximum(z - tau, 0).sum() > 1 else (low, tau)
    return np.maximum(z - (low + high) / 2, 0)


@pytest.mark.parametrize("seed", range(5))
def test_sparsemax_is_the_projection_onto_the_simplex(seed):
    scores = torch.randn(8, 12, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2
    ours = sparsemax(scores).numpy()
    expected = np.stack([simplex_projection(row) for row in scores.numpy()])
    np.testing.assert_allclose(ours, expected, atol=1e-9)
    assert (ours == 0).any() and np.allclose(ours.sum(axis=1), 1)


def test_sparsemax_of_a_hand_computed_case():
    """z = (2, 1, 0.1): k(z) = 2 (1 + 2·1 > 3, 1 + 3·0.1 < 3.1), τ = (3 − 1)/2 = 1, p = (1, 0, 0); with 1.5:
    τ = 0.75, p = (0.75, 0.25, 0)."""
    assert sparsemax(torch.tensor([2.0, 1.0, 0.1])).tolist() == [1.0, 0.0, 0.0]
    assert sparsemax(torch.tensor([1.5, 1.0, 0.1])).tolist() == pytest.approx([0.75, 0.25, 0.0])


def omp_reference(y: np.ndarray, atoms: np.ndarray, k: int) -> tuple[list[int], np.ndarray]:
    """Textbook OMP, one target, loops: the atom of largest |⟨r, d⟩|/‖d‖, then least squares on the support."""
    support: list[int] = []
    residual = y.copy()
    coefficients = np.zeros(0)
    norms = np.linalg.norm(atoms, axis=1)
    for _ in range(k):
        scores = np.abs(atoms @ residual) / norms
        scores[support] = -1
        support.append(int(scores.argmax()))
        coefficients = np.linalg.lstsq(atoms[support].T, y, rcond=None)[0]
        residual = y - atoms[support].T @ coefficients
    return support, coefficients


@pytest.mark.parametrize("seed", range(4))
def test_omp_matches_the_textbook_loop(seed):
    generator = torch.Generator().manual_seed(seed)
    atoms, targets = torch.randn(40, 12, generator=generator), torch.randn(6, 12, generator=generator)
    indices, coefficients = orthogonal_matching_pursuit(targets, atoms, 5)
    for row in range(6):
        support, expected = omp_reference(targets[row].double().numpy(), atoms.double().numpy(), 5)
        assert indices[row].tolist() == support
        np.testing.assert_allclose(coefficients[row].numpy(), expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_omp_recovers_a_sparse_combination_exactly(seed):
    """y = 2·d₃ − 0.5·d₁₇ over near-orthogonal atoms (64 wide): OMP finds both, and the exact coefficients."""
    generator = torch.Generator().manual_seed(seed)
    atoms = torch.linalg.qr(torch.randn(64, 30, generator=generator, dtype=torch.float64))[0].T  # orthonormal rows
    target = 2 * atoms[3] - 0.5 * atoms[17]
    indices, coefficients = orthogonal_matching_pursuit(target.unsqueeze(0), atoms, 8)
    found = dict(zip(indices[0].tolist(), coefficients[0].tolist()))
    assert found[3] == pytest.approx(2.0) and found[17] == pytest.approx(-0.5)
    assert sum(abs(c) for i, c in found.items() if i not in (3, 17)) < 1e-5  # the pursuit works in float32


OLD = ["<pad>", "▁ska", "te", "▁board", "▁side", "walk", "▁vector", "▁graph", "ics", "<unk>"]
NEW = ["<pad>", "▁skate", "▁board", "▁sidewalk", "<svg>", "▁side"]
SPLITS = {"skate": [1, 2], " skate": [1, 2], "sidewalk": [4, 5], "vector graphics": [6, 7, 8]}


def request(**given) -> MethodRequest:
    match = match_vocabularies(OLD, NEW, old_special={"pad": "<pad>"}, new_special={"pad": "<pad>"})
    anchors = {i: int(s) for i, s in enumerate(match.source_ids.tolist()) if s > 0}
    return MethodRequest(
        new_tokens=NEW,
        old_tokens=OLD,
        pending=match.unmatched,
        anchors=anchors,
        text_of=lambda token: token.lstrip("▁"),
        split=lambda texts: [SPLITS.get(text, []) for text in texts],
        **given,
    )


def table(seed: int = 0) -> torch.Tensor:
    return torch.randn(len(OLD), 6, generator=torch.Generator().manual_seed(seed))


def rows_of(method: str, weights: torch.Tensor, **given) -> tuple[list, torch.Tensor]:
    ask = request(**given)
    answers = resolve_method(method)(ask, ask.pending)
    return answers, combine(
        weights, [MEAN if a is None else a for a in answers], table_numbers(weights, None, 0).mean_row
    )


@pytest.mark.parametrize("seed", range(3))
def test_pieces_is_the_mean_of_the_old_pieces_rows(seed):
    weights = table(seed)
    answers, rows = rows_of("pieces", weights)
    assert request().pending == [1, 3, 4]
    torch.testing.assert_close(rows[0], weights[[1, 2]].mean(0))
    torch.testing.assert_close(rows[1], weights[[4, 5]].mean(0))
    assert answers[2] is None  # '<svg>' has no pieces: the fallback's


def test_description_token_and_mean():
    weights = table(1)
    _, rows = rows_of("description", weights, descriptions={"<svg>": "vector graphics"})
    torch.testing.assert_close(rows[2], weights[[6, 7, 8]].mean(0))
    _, rows = rows_of("token:▁graph", weights)
    assert all(torch.equal(row, weights[7]) for row in rows)
    answers, rows = rows_of("mean", weights)
    assert answers == [MEAN] * 3
    torch.testing.assert_close(rows[0], weights[1:].mean(0))  # the padding row (0) left out
    with pytest.raises(ValueError, match="no token '▁nope'"):
        rows_of("token:▁nope", weights)
    with pytest.raises(ValueError, match="needs descriptions="):
        rows_of("description", weights)


@pytest.mark.parametrize("seed", range(3))
def test_focus_is_sparsemax_of_cosines_over_the_anchors(seed):
    """FOCUS's formula by hand in numpy: w = sparsemax(cos(aux_t, aux_anchors)), row = Σ w_j·E[old_j]."""
    generator = torch.Generator().manual_seed(seed)
    weights, aux = table(seed), torch.randn(len(NEW), 5, generator=generator)
    space = StaticSpace(aux, torch.ones(len(NEW), dtype=torch.bool), "test")
    _, rows = rows_of("focus", weights, auxiliary=lambda: space)
    anchors = [(2, 3), (5, 4)]  # new '▁board' → old 3, new '▁side' → old 4 ('<pad>' is special, no anchor)
    a = aux.double().numpy()
    for position, token in enumerate([1, 3, 4]):
        cosines = np.array([a[token] @ a[n] / np.linalg.norm(a[token]) / np.linalg.norm(a[n]) for n, _ in anchors])
        w = simplex_projection(cosines)
        expected = sum(w[j] * weights[o].double().numpy() for j, (_, o) in enumerate(anchors))
        np.testing.assert_allclose(rows[position].numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_omp_applies_the_donors_coefficients_in_the_old_space(seed):
    """A donor row that is exactly 3·(anchor '▁board') − (anchor '▁side'): the new row is 3·E[3] − E[4]."""
    generator = torch.Generator().manual_seed(seed)
    donor = torch.randn(len(NEW), 8, generator=generator, dtype=torch.float64)
    donor[1] = 3 * donor[2] - donor[5]
    space = StaticSpace(donor.float(), torch.ones(len(NEW), dtype=torch.bool), "donor")
    weights = table(seed)
    _, rows = rows_of("omp:2", weights, donor=lambda role: space)
    torch.testing.assert_close(rows[0], 3 * weights[3] - weights[4], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_neighbors_is_inverse_distance_weighting_of_the_nearest_anchors(seed):
    """Shepard's weights by hand: the k = 1 nearest anchor alone; with both anchors w_j ∝ 1/‖x_t − x_j‖."""
    generator = torch.Generator().manual_seed(seed)
    donor = torch.randn(len(NEW), 4, generator=generator, dtype=torch.float64)
    space = StaticSpace(donor.float(), torch.ones(len(NEW), dtype=torch.bool), "donor")
    weights = table(seed)
    _, both = rows_of("neighbors", weights, donor=lambda role: space)
    _, nearest = rows_of("neighbors:1", weights, donor=lambda role: space)
    anchors = [(2, 3), (5, 4)]  # (new id, old id)
    for position, token in enumerate([1, 3, 4]):
        x = donor.float()[token].double()
        distances = np.array([float((x - donor.float()[n].double()).norm()) for n, _ in anchors])
        w = (1 / distances) / (1 / distances).sum()
        expected = sum(w[j] * weights[o].double().numpy() for j, (_, o) in enumerate(anchors))
        np.testing.assert_allclose(both[position].numpy(), expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(nearest[position], weights[anchors[int(distances.argmin())][1]])


def test_methods_refuse_what_they_cannot_do():
    weights = table()
    with pytest.raises(ValueError, match="need donor="):
        rows_of("omp", weights)
    with pytest.raises(ValueError, match="need donor="):
        rows_of("neighbors", weights)
    with pytest.raises(ValueError, match="target-domain text"):
        rows_of("focus", weights)
    with pytest.raises(ValueError, match="unknown transplant method 'fvt'"):
        resolve_method("fvt")
    with pytest.raises(ValueError, match="k must be ≥ 1"):
        resolve_method("omp:0")
