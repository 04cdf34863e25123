"""checkpoint:<path> — self-pretraining ([KB]): rows by token string from an earlier model."""

from __future__ import annotations

import pytest
import torch

from lightning_embinit.init.sources import SourceRequest, resolve_source

OLD_TOKENS = ["<pad>", "<unk>", "the", "cat", "sat", "on", "mat"]
SPECIALS = {"pad": "<pad>", "unk": "<unk>"}


class NotAllowlisted:
    """An object torch.load(weights_only=True) refuses to unpickle."""

    def __init__(self, value: int) -> None:
        self.value = value


def request_for(tokens, dim=4, slot="encoder", seed=0):
    return SourceRequest(
        slot,
        len(tokens),
        dim,
        tokens=list(tokens),
        special_tokens=SPECIALS,
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.fixture
def old_weight():
    return torch.arange(len(OLD_TOKENS) * 4, dtype=torch.float32).reshape(len(OLD_TOKENS), 4)


@pytest.fixture
def lightning_style(tmp_path, old_weight):
    path = tmp_path / "epoch=3.ckpt"
    torch.save(
        {
            "epoch": 3,
            "state_dict": {"model.embed.weight": old_weight, "model.head.bias": torch.zeros(7)},
            "embinit": {"slots": {"encoder": {"parameter": "model.embed.weight", "tokens": OLD_TOKENS}}},
        },
        path,
    )
    return path


def test_rows_are_taken_by_token_string(lightning_style, old_weight):
    new_tokens = ["<pad>", "<unk>", "mat", "dog", "the", "The"]
    built = resolve_source(f"checkpoint:{lightning_style}", oov="zeros").build(request_for(new_tokens))
    assert torch.equal(built.weight[[0, 1, 2, 4, 5]], old_weight[[0, 1, 6, 2, 2]])
    assert torch.count_nonzero(built.weight[3]) == 0
    assert built.pretrained_rows.tolist() == [True, True, True, False, True, True]
    assert built.coverage.by_rule == {"exact": 4, "lower": 1} and built.coverage.missing == ["dog"]
    assert "model.embed.weight" in built.description and "epoch=3.ckpt" in built.description


def test_slot_map_and_errors_naming_recorded_slots(lightning_style, old_weight):
    built = resolve_source(f"checkpoint:{lightning_style}", slot_map={"source_side": "encoder"}).build(
        request_for(["cat"], slot="source_side")
    )
    assert torch.equal(built.weight[0], old_weight[3])
    with pytest.raises(ValueError, match=r"no embinit record for slot 'decoder' \(recorded slots: \['encoder'\]\)"):
        resolve_source(f"checkpoint:{lightning_style}").build(request_for(["cat"], slot="decoder"))


def test_plain_state_dict_with_parameter_and_tokens(tmp_path, old_weight):
    path = tmp_path / "weights.pt"
    torch.save({"embed.weight": old_weight, "proj.weight": torch.zeros(3, 4)}, path)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(OLD_TOKENS) + "\n", encoding="utf-8")
    for tokens in (OLD_TOKENS, str(vocab_file)):
        built = resolve_source(f"checkpoint:{path}", parameter="embed.weight", tokens=tokens).build(
            request_for(["sat", "on"])
        )
        assert torch.equal(built.weight, old_weight[[4, 5]])
    with pytest.raises(ValueError, match=r"parameter='<state dict key>'.*'embed.weight', 'proj.weight'"):
        resolve_source(f"checkpoint:{path}").build(request_for(["sat"]))
    with pytest.raises(ValueError, match="has no tensor 'nope'"):
        resolve_source(f"checkpoint:{path}", parameter="nope", tokens=OLD_TOKENS).build(request_for(["sat"]))
    with pytest.raises(ValueError, match="3 tokens for 'embed.weight' with 7 rows"):
        resolve_source(f"checkpoint:{path}", parameter="embed.weight", tokens=["a", "b", "c"]).build(request_for(["a"]))


def test_dimension_change_needs_a_projection(lightning_style):
    with pytest.raises(ValueError, match="D_s=4 but slot 'encoder' has embedding_dim D=6"):
        resolve_source(f"checkpoint:{lightning_style}").build(request_for(["cat"], dim=6))
    built = resolve_source(f"checkpoint:{lightning_style}", project="random_orthogonal").build(
        request_for(["cat", "mat"], dim=6)
    )
    assert built.weight.shape == (2, 6)


def test_untrusted_objects_need_weights_only_false(tmp_path, old_weight):
    path = tmp_path / "custom.ckpt"
    torch.save(
        {
            "state_dict": {"e.weight": old_weight},
            "hyper_parameters": {"thing": NotAllowlisted(1)},
            "embinit": {"slots": {"encoder": {"parameter": "e.weight", "tokens": OLD_TOKENS}}},
        },
        path,
    )
    with pytest.raises(ValueError, match="weights_only=False"):
        resolve_source(f"checkpoint:{path}").build(request_for(["cat"]))
    built = resolve_source(f"checkpoint:{path}", weights_only=False).build(request_for(["cat"]))
    assert torch.equal(built.weight[0], old_weight[3])


def test_missing_file_and_bad_options(tmp_path):
    with pytest.raises(ValueError, match="none.ckpt.*no such file"):
        resolve_source(f"checkpoint:{tmp_path / 'none.ckpt'}")
    path = tmp_path / "x.pt"
    torch.save({}, path)
    with pytest.raises(ValueError, match="slot_map must map"):
        resolve_source(f"checkpoint:{path}", slot_map=["a"])


@pytest.fixture
def torch_loads(monkeypatch):
    """The paths torch.load has read (after dropping any kept checkpoint)."""
    from lightning_embinit.init.sources import checkpoint

    checkpoint.release_loaded()
    calls = []
    original = torch.load

    def counting(path, *args, **kwargs):
        calls.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    yield calls
    checkpoint.release_loaded()


def test_one_build_round_loads_the_checkpoint_once(lightning_style, old_weight, torch_loads):
    import os

    from lightning_embinit.init.sources import checkpoint

    for slot in ("encoder", "decoder"):  # two sources (slots with their own options), one load
        built = resolve_source(f"checkpoint:{lightning_style}", slot_map={"decoder": "encoder"}).build(
            request_for(["cat"], slot=slot)
        )
        assert torch.equal(built.weight[0], old_weight[3])
    assert len(torch_loads) == 1
    torch.save(
        {
            "state_dict": {"model.embed.weight": old_weight + 1},
            "embinit": {"slots": {"encoder": {"parameter": "model.embed.weight", "tokens": OLD_TOKENS}}},
        },
        lightning_style,
    )
    os.utime(lightning_style, ns=(0, os.stat(lightning_style).st_mtime_ns + 10**9))
    built = resolve_source(f"checkpoint:{lightning_style}").build(request_for(["cat"]))
    assert torch.equal(built.weight[0], old_weight[3] + 1) and len(torch_loads) == 2
    checkpoint.release_loaded()
    resolve_source(f"checkpoint:{lightning_style}").build(request_for(["cat"]))
    assert len(torch_loads) == 3


def test_a_legacy_checkpoint_that_cannot_be_mapped_is_not_kept(tmp_path, old_weight, torch_loads):
    path = tmp_path / "legacy.pt"
    torch.save({"embed.weight": old_weight}, path, _use_new_zipfile_serialization=False)
    for _ in range(2):
        built = resolve_source(f"checkpoint:{path}", parameter="embed.weight", tokens=OLD_TOKENS).build(
            request_for(["on"])
        )
        assert torch.equal(built.weight[0], old_weight[5])
    assert len(torch_loads) == 2  # one plain load per build (not a zip archive: no memory-mapped attempt), none kept


def test_round_trip_through_a_lightning_checkpoint_written_by_the_callback(tmp_path):
    from lightning.pytorch import Trainer

    from lightning_embinit.callbacks import EmbeddingInitCallback
    from tests.host_models import VOCAB, TwoSlotHost, token_loader

    model = TwoSlotHost()
    trainer = Trainer(
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
        callbacks=[EmbeddingInitCallback(source="xavier", seed=0, verbose=False)],
    )
    trainer.fit(model, token_loader())
    path = tmp_path / "trained.ckpt"
    trainer.save_checkpoint(path)

    new_vocab = ["<pad>", "<unk>", "far", "ran", "zebra", "the"]
    for slot, weight in (("encoder", model.encoder_embedding.weight), ("decoder", model.decoder_embedding.weight)):
        built = resolve_source(f"checkpoint:{path}").build(request_for(new_vocab, dim=16, slot=slot))
        for position, token in enumerate(new_vocab):
            if token in VOCAB:
                assert torch.equal(built.weight[position], weight.detach()[VOCAB.index(token)])
        assert built.coverage.missing == ["zebra"]
