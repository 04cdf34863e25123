"""Every causal, masked and sequence-to-sequence LM architecture of the installed transformers, built tiny, checked
against its own forward and its own resize (tests/architecture_checks.py): the first half, one pytest-xdist worker;
tests/test_every_architecture_b.py has the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.architecture_checks import check_architecture
from tests.tiny_architectures import (
    ARCHITECTURES,
    EXTENSION_DIFFERS,
    OVERRIDES,
    SKIPS,
    build,
    coverage_sentence,
    half,
)


@pytest.mark.parametrize("name", half(0))
def test_the_family_code_holds_on_the_architecture(name):
    if name in SKIPS:
        pytest.skip(SKIPS[name])
    check_architecture(name, build(name))


def test_the_docs_state_how_many_architectures_are_checked():
    page = (Path(__file__).parents[1] / "docs" / "howto" / "family_hugging_face.md").read_text()
    assert coverage_sentence() in " ".join(page.replace("**", "").split()), (
        f"the page should say: {coverage_sentence()}"
    )


def test_every_override_skip_and_difference_names_an_architecture_of_this_transformers():
    for table in (OVERRIDES, SKIPS, EXTENSION_DIFFERS):
        assert set(table) <= set(ARCHITECTURES), set(table) - set(ARCHITECTURES)
    assert not set(SKIPS) & set(EXTENSION_DIFFERS)
