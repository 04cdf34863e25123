"""The torch-only core: registry, slots, and the path without Lightning."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from lightning_embinit import initialize_embeddings
from lightning_embinit.init import (
    EmbeddingSlot,
    Registry,
    discover_slots,
    select_slots,
    sinusoidal_encoding,
    slot_from_path,
)
from lightning_embinit.init.report import format_report


def test_core_imports_without_lightning():
    code = (
        "import sys, lightning_embinit.init, lightning_embinit.init.pipeline; "
        "print(any(m.split('.')[0] in ('lightning', 'pytorch_lightning') for m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_registry_names_arguments_and_errors():
    registry: Registry[str] = Registry("widget")
    registry.add("plain", lambda: "p")
    registry.add("sized", lambda size: f"s{size}", takes_argument=True)
    assert registry.build("plain") == "p" and registry.build("sized:a:b") == "sa:b"
    assert "sized:3" in registry and "sized" not in registry and "other" not in registry
    with pytest.raises(ValueError, match=r"unknown widget 'other'; known widgets: plain, sized:<arg>"):
        registry.build("other")
    with pytest.raises(ValueError, match="already registered"):
        registry.add("plain", lambda: "again")


class HFStyle(nn.Module):
    """Like a Hugging Face model: no EmbeddingHost, nested tables, a tied LM head."""

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.embeddings = nn.Module()
        self.model.embeddings.word_embeddings = nn.Embedding(20, 8, padding_idx=1)
        self.model.embeddings.position_embeddings = nn.Embedding(16, 8)
        self.lm_head = nn.Linear(8, 20, bias=False)
        self.lm_head.weight = self.model.embeddings.word_embeddings.weight


def test_discovery_names_tables_by_path_and_finds_tied_heads():
    slots = discover_slots(HFStyle())
    assert list(slots) == ["model.embeddings.word_embeddings", "model.embeddings.position_embeddings"]
    words = slots["model.embeddings.word_embeddings"]
    assert words.tied_modules == ("lm_head",) and words.padding_idx == 1 and words.input_scale == pytest.approx(8**0.5)
    assert slots["model.embeddings.position_embeddings"].tied_modules == ()


def test_select_by_path_and_bad_paths():
    model = HFStyle()
    assert list(select_slots(model, ["model.embeddings.word_embeddings"])) == ["model.embeddings.word_embeddings"]
    with pytest.raises(ValueError, match="unknown slot 'model.nope'"):
        select_slots(model, ["model.nope"])
    with pytest.raises(ValueError, match="is a Linear, not an nn.Embedding"):
        slot_from_path(model, "lm_head")


def test_slot_checks_its_token_count():
    with pytest.raises(ValueError, match="6 token strings for a table of only 5 rows"):
        EmbeddingSlot("s", nn.Embedding(5, 2), tokens=["a", "b", "c", "d", "e", "f"])
    padded = EmbeddingSlot("s", nn.Embedding(8, 2), tokens=["a", "b", "c"])  # rows past the tokens are unnamed
    assert padded.num_embeddings == 8 and len(padded.tokens) == 3


def test_initialize_embeddings_without_lightning_is_all_or_nothing():
    model = HFStyle()
    reports = initialize_embeddings(model, source="normal:0.05", standardize=(0.0, 0.1), seed=0)
    words = model.model.embeddings.word_embeddings.weight
    assert torch.count_nonzero(words[1]) == 0
    assert reports["model.embeddings.word_embeddings"]["tied_modules"] == ["lm_head"]
    assert "now hold these weights too" in format_report(reports)
    before = words.detach().clone()
    with pytest.raises(ValueError, match="standardize='nope' is not a scheme"):
        initialize_embeddings(model, slots={"model.embeddings.position_embeddings": {"standardize": "nope"}})
    assert torch.equal(words, before)


def test_sinusoidal_layouts():
    interleaved, halves = sinusoidal_encoding(10, 8), sinusoidal_encoding(10, 8, layout="halves")
    assert interleaved[3, 2] == pytest.approx(torch.sin(torch.tensor(3 / 10000 ** (2 / 8))).item(), rel=1e-6)
    assert interleaved[3, 3] == pytest.approx(torch.cos(torch.tensor(3 / 10000 ** (2 / 8))).item(), rel=1e-6)
    assert torch.allclose(halves[:, :4], interleaved[:, 0::2]) and torch.allclose(halves[:, 4:], interleaved[:, 1::2])
    with pytest.raises(ValueError, match="unknown positional layout 'spiral'; known layouts: interleaved, halves"):
        sinusoidal_encoding(4, 4, layout="spiral")


def test_the_embinit_console_script_is_installed():
    script = Path(sys.executable).with_name("embinit")
    assert script.exists(), f"{script} missing: is the package installed into this environment?"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "{fit,validate,test,predict}" in result.stdout
    assert not Path(sys.executable).with_name("lightning").exists() or "lightning_embinit" not in Path(
        sys.executable
    ).with_name("lightning").read_text(errors="replace")


def test_cli_help_and_print_config(capsys):
    """In this process (the console script's own process is tested in test_console_scripts.py)."""
    from lightning_embinit.commands import main as cli

    for subcommand in ("fit", "validate", "test"):
        with pytest.raises(SystemExit) as done:
            cli.main([subcommand, "--help"])
        assert done.value.code == 0 and "--config" in capsys.readouterr().out
    config = Path(__file__).resolve().parent.parent / "examples" / "configs" / "tied_lm.yaml"
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "--config", str(config), "--print_config"])
    assert done.value.code == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    callbacks = {c["class_path"]: c["init_args"] for c in resolved["trainer"]["callbacks"]}
    assert callbacks["lightning_embinit.EmbeddingInitCallback"]["source"] == "normal:1/sqrt(d)"
    assert resolved["model"]["class_path"] == "lightning_embinit.models.TiedEmbeddingLM"


def test_bfloat16_table_is_standardized_in_place_of_its_dtype():
    model = nn.Module()
    model.table = nn.Embedding(30000, 256, padding_idx=7).to(torch.bfloat16)
    reports = initialize_embeddings(model, source="normal:3.0", standardize="xavier", seed=0)
    weight = model.table.weight
    assert weight.dtype == torch.bfloat16 and torch.count_nonzero(weight[7]) == 0
    target = (2 / (30000 + 256)) ** 0.5
    body = torch.cat((weight[:7], weight[8:])).double()
    assert body.std(unbiased=False).item() == pytest.approx(target, rel=1e-5)
    assert abs(body.mean().item()) < 1e-5 * target
    assert reports["table"]["std"] == pytest.approx(target, rel=1e-5)


def test_slots_sharing_a_recipe_share_one_source_object():
    from tests.sources_for_tests import CountingSource

    class Counting(CountingSource):
        instances = 0

        def __init__(self, spec):
            super().__init__(spec)
            Counting.instances += 1

    from lightning_embinit.init import SOURCES

    SOURCES.add("counting-test", lambda: Counting("hf"))
    try:
        model = HFStyle()
        initialize_embeddings(model, source="counting-test", seed=0)
        assert Counting.instances == 1
    finally:
        SOURCES._entries.pop("counting-test")
