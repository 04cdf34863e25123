"""Every causal, masked and sequence-to-sequence LM architecture of the installed transformers, built tiny, checked
against its own forward and its own resize (tests/architecture_checks.py): the second half, one pytest-xdist worker;
tests/test_every_architecture_a.py has the other."""

from __future__ import annotations

import pytest

from tests.architecture_checks import check_architecture
from tests.tiny_architectures import SKIPS, build, half


@pytest.mark.parametrize("name", half(1))
def test_the_family_code_holds_on_the_architecture(name):
    if name in SKIPS:
        pytest.skip(SKIPS[name])
    check_architecture(name, build(name))
