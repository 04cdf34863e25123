"""Vocabulary extension checks everything before any tensor changes: the tokens (empty, whitespace-only from a list
or file), the old tables (NaN or inf, a table with only its padding row), the probe's width; each error names the
problem and what to do, and the model is left exactly as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_embinit.init.extension import extend_vocabulary
from tests.test_vocabulary_extension import PLAIN_TOKENS, Plain


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_untouched(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(
        after[name].shape == tensor.shape and torch.equal(after[name], tensor) for name, tensor in before.items()
    )
    assert model.embed.num_embeddings == len(PLAIN_TOKENS) and model.out.out_features == len(PLAIN_TOKENS)


def extend(model: nn.Module, tokens, **options):
    return extend_vocabulary(model, tokens, old_tokens=PLAIN_TOKENS, outputs=["out"], **options)


@pytest.mark.parametrize(
    ("added", "message"),
    [
        ([""], "empty token ''"),
        (["\r"], "whitespace-only strings ['\\r']"),
        (["ok", "  "], "whitespace-only strings ['  ']"),
    ],
)
def test_empty_and_whitespace_only_tokens_from_a_list_are_refused(added, message):
    model = Plain()
    before = snapshot(model)
    with pytest.raises(ValueError, match="slot 'embed'") as raised:
        extend(model, PLAIN_TOKENS + added, rule="mean")
    assert message in str(raised.value)
    assert_untouched(model, before)


def test_a_crlf_token_file_with_a_blank_line_adds_no_blank_token(tmp_path):
    path = tmp_path / "tokens.txt"
    path.write_bytes(("\r\n".join([*PLAIN_TOKENS, "new"]) + "\r\n\r\n").encode())
    model = Plain()
    report = extend(model, path, rule="mean")
    assert report["added_rows"] == 1 and report["added_tokens"] == ["new"]


@pytest.mark.parametrize(("seed", "where"), [(0, "table"), (1, "out"), (2, "bias")])
def test_an_old_table_with_nan_or_inf_is_named_with_its_rows_not_blamed_on_the_rule(seed, where):
    model = Plain(seed=seed)
    row = 1 + seed
    with torch.no_grad():
        {"table": model.embed.weight, "out": model.out.weight, "bias": model.out.bias}[where][row] = float("nan")
    before = snapshot(model)
    with pytest.raises(ValueError, match=rf"already holds NaN or inf \(rows \[{row}\]\)") as raised:
        extend(model, PLAIN_TOKENS + ["new"], rule="mean")
    assert "rule 'mean' made rows" not in str(raised.value) and "nothing was written" in str(raised.value)
    assert all(torch.equal(a, b) or torch.isnan(a).any() for a, b in zip(model.state_dict().values(), before.values()))


@pytest.mark.parametrize("rule", ["mean", "mean_cov", "mean_cov:1"])
def test_a_table_whose_only_row_is_padding_names_the_rule_and_the_way_out(rule):
    model = nn.Module()
    model.embed = nn.Embedding(1, 4, padding_idx=0)
    with pytest.raises(ValueError, match=rf"no row but the padding row 0, so rule '{rule}'.*rule='xavier'"):
        extend_vocabulary(model, ["<pad>", "a"], old_tokens=["<pad>"], rule=rule)
    assert model.embed.num_embeddings == 1
    report = extend_vocabulary(model, ["<pad>", "a"], old_tokens=["<pad>"], rule="xavier")
    assert report["added_rows"] == 1 and torch.isfinite(model.embed.weight).all()


def test_a_probe_of_the_wrong_width_is_refused_before_anything_changes():
    model = Plain()
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"shape \(5, 3\), but the output matrix takes states of width 4.*nothing was"):
        extend(model, PLAIN_TOKENS + ["new"], rule="mean", probe=torch.zeros(5, 3))
    assert_untouched(model, before)


def test_a_probe_function_of_the_wrong_width_says_the_model_was_extended():
    model = Plain()
    with pytest.raises(ValueError, match="the model has been extended; only the report's new_token_mass is missing"):
        extend(model, PLAIN_TOKENS + ["new"], rule="mean", probe=lambda m: torch.zeros(5, 3))
    assert model.embed.num_embeddings == len(PLAIN_TOKENS) + 1 == model.out.out_features  # complete, consistent
