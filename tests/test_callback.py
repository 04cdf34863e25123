import math

import pytest
import torch
from lightning.pytorch.loggers import Logger

from lightning_embinit import EmbeddingInitCallback, initialize_embeddings
from lightning_embinit.init import sinusoidal_encoding
from tests.host_models import VOCAB, NoEmbeddingModel, PlainEmbeddingModel, TwoSlotHost, make_trainer, token_loader
from tests.sources_for_tests import BrokenSource, CountingSource, EvenRowsSource


class RecordingLogger(Logger):
    def __init__(self):
        super().__init__()
        self.metrics, self.hyperparameters = {}, {}

    @property
    def name(self):
        return "recording"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        self.hyperparameters.update(params)

    def log_metrics(self, metrics, step=None):
        self.metrics.update(metrics)


def weights(model):
    return model.encoder_embedding.weight.detach().clone(), model.decoder_embedding.weight.detach().clone()


def test_fit_initializes_every_slot_as_the_core_does(tmp_path):
    model = TwoSlotHost(lr=0.0)
    callback = EmbeddingInitCallback(source="xavier", seed=3, verbose=False)
    make_trainer(tmp_path, [callback]).fit(model, token_loader())
    reference = TwoSlotHost()
    initialize_embeddings(reference, source="xavier", seed=3)
    assert torch.equal(model.encoder_embedding.weight, reference.encoder_embedding.weight)
    assert torch.equal(model.decoder_embedding.weight, reference.decoder_embedding.weight)
    assert torch.count_nonzero(model.encoder_embedding.weight[0]) == 0
    bound = math.sqrt(6 / (len(VOCAB) + 16))
    assert model.encoder_embedding.weight.abs().max() <= bound
    assert model.head.weight is model.decoder_embedding.weight


def test_report_is_printed_logged_and_checkpointed(tmp_path, caplog):
    model, logger = TwoSlotHost(lr=0.0), RecordingLogger()
    callback = EmbeddingInitCallback(source="normal:0.5", standardize="xavier", seed=0)
    trainer = make_trainer(tmp_path, [callback], logger=logger)
    with caplog.at_level("INFO"):
        trainer.fit(model, token_loader())
    encoder = callback.reports["encoder"]
    actual = model.encoder_embedding.weight.detach().double()[1:]  # statistics leave out the padding row
    assert encoder["std"] == pytest.approx(actual.std(unbiased=False).item(), rel=1e-6)
    assert encoder["std"] == pytest.approx(math.sqrt(2 / (len(VOCAB) + 16)), rel=1e-5)
    assert encoder["scaled_std"] == pytest.approx(4.0 * encoder["std"], rel=1e-9)
    assert encoder["pe_std"] == pytest.approx(sinusoidal_encoding(32, 16).double().std(unbiased=False).item(), rel=1e-6)
    assert encoder["ratio"] == pytest.approx(encoder["scaled_std"] / encoder["pe_std"])
    assert encoder["transforms"] == ["standardize(xavier)"]
    assert encoder["source"] == "normal:0.5" and encoder["seed"] == 0
    assert callback.reports["decoder"]["tied_modules"] == ["head"]
    assert "Embedding initialization" in caplog.text and "now hold these weights too" in caplog.text
    assert logger.metrics["embinit/encoder/std"] == pytest.approx(encoder["std"])
    assert logger.hyperparameters["embinit/decoder/tied_modules"] == "['head']"
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=False)
    (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("EmbeddingInitCallback")]
    assert state["reports"]["encoder"]["std"] == encoder["std"]
    assert checkpoint["embinit"]["slots"]["encoder"] == {"parameter": "encoder_embedding.weight", "tokens": VOCAB}


def test_validate_and_test_leave_weights_untouched(tmp_path):
    model = TwoSlotHost()
    before = weights(model)
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source="ones", verbose=False)], limit_test_batches=1)
    trainer.validate(model, token_loader(), verbose=False)
    trainer.test(model, token_loader(), verbose=False)
    after = weights(model)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


def test_never_applies_twice(tmp_path):
    model, callback = TwoSlotHost(), EmbeddingInitCallback(source="xavier", verbose=False)
    trainer = make_trainer(tmp_path, [callback])
    callback.setup(trainer, model, "fit")  # by hand, outside Trainer.fit: it builds
    with torch.no_grad():
        model.encoder_embedding.weight.add_(1.0)
    moved = weights(model)
    callback.setup(trainer, model, "fit")
    assert torch.equal(weights(model)[0], moved[0])


def fit_and_save(tmp_path, name="resume.ckpt"):
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source="xavier", seed=0, verbose=False)], max_steps=2)
    trainer.fit(TwoSlotHost(lr=0.5), token_loader())
    path = tmp_path / name
    trainer.save_checkpoint(path)
    return path


def test_resume_keeps_the_checkpoint_weights_and_report(tmp_path):
    """The build at setup is thrown away: Lightning restores the checkpoint's tables over it, bit for bit."""
    path = fit_and_save(tmp_path)
    saved = torch.load(path, weights_only=False)["state_dict"]
    source, logger = CountingSource("normal:5"), RecordingLogger()
    second = EmbeddingInitCallback(source=source, seed=1, verbose=False)
    resumed = TwoSlotHost(lr=0.0)
    make_trainer(tmp_path, [second], max_steps=2, logger=logger).fit(resumed, token_loader(), ckpt_path=path)
    assert second.resumed and source.builds == 2  # one build per slot at setup, then replaced by the restore
    assert not any(key.startswith("embinit/") for key in logger.metrics)
    assert torch.equal(resumed.encoder_embedding.weight, saved["encoder_embedding.weight"])
    assert torch.equal(resumed.decoder_embedding.weight, saved["decoder_embedding.weight"])
    assert second.reports["encoder"]["source"] == "xavier"


def test_a_checkpoint_used_earlier_by_validate_does_not_count_as_a_resume(tmp_path):
    path = fit_and_save(tmp_path)
    source = CountingSource("ones")
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source=source, verbose=False)], max_steps=1)
    trainer.validate(TwoSlotHost(), token_loader(), ckpt_path=path, verbose=False)
    fresh = TwoSlotHost(lr=0.0)
    trainer.fit(fresh, token_loader())
    assert source.builds == 2
    assert torch.all(fresh.encoder_embedding.weight[1:] == 1)


def test_trainable_false_freezes_the_table_and_warns_about_the_tied_head(tmp_path):
    model = TwoSlotHost(lr=0.5)
    callback = EmbeddingInitCallback(source="xavier", trainable=False, verbose=False)
    with pytest.warns(UserWarning, match=r"slot 'decoder' is frozen, and so is the output layer tied to it \(head\)"):
        make_trainer(tmp_path, [callback], max_steps=3).fit(model, token_loader())
    assert not model.decoder_embedding.weight.requires_grad and not model.head.weight.requires_grad
    reference = TwoSlotHost()
    initialize_embeddings(reference, source="xavier", seed=callback.seed_used)
    assert torch.equal(model.encoder_embedding.weight, reference.encoder_embedding.weight)
    assert not torch.equal(model.mix.weight, reference.mix.weight)


def test_pretrained_rows_freezes_only_rows_from_the_source(tmp_path):
    model = TwoSlotHost(lr=0.5)
    callback = EmbeddingInitCallback(source=EvenRowsSource(), trainable="pretrained_rows", seed=0, verbose=False)
    make_trainer(tmp_path, [callback], max_steps=4).fit(model, token_loader())
    table = model.encoder_embedding.weight.detach()
    rows = torch.arange(len(VOCAB))
    even = (rows % 2 == 0) & (rows > 0)
    assert torch.equal(table[even], (0.5 + rows[even].float() / 100).unsqueeze(1).expand(-1, 16))
    reference = TwoSlotHost()
    initialize_embeddings(reference, source=EvenRowsSource(), seed=0)
    odd = rows % 2 == 1
    assert not torch.allclose(table[odd], reference.encoder_embedding.weight[odd])
    assert callback.reports["encoder"]["pretrained_rows"] == 4  # rows 2, 4, 6, 8: the padding row is written as zeros
    assert callback.reports["encoder"]["coverage"]["fraction"] == pytest.approx(0.5)


def test_per_slot_sources_and_dotted_paths(tmp_path):
    model = TwoSlotHost(lr=0.0)
    callback = EmbeddingInitCallback(
        slots={"encoder": {"source": "normal:2.0"}, "decoder": {"source": "ones", "scale": 0.25}}, seed=0, verbose=False
    )
    make_trainer(tmp_path, [callback]).fit(model, token_loader())
    assert model.encoder_embedding.weight[1:].std().item() == pytest.approx(2.0, rel=0.15)
    assert torch.all(model.decoder_embedding.weight[1:] == 0.25)
    assert callback.reports["decoder"]["transforms"] == ["scale(0.25)"]

    plain = PlainEmbeddingModel()
    callback = EmbeddingInitCallback(source="zeros", slots=["body.word_embeddings"], verbose=False)
    make_trainer(tmp_path, [callback], max_steps=0).fit(plain, token_loader(vocab_size=12))
    assert torch.count_nonzero(plain.body.word_embeddings.weight) == 0


def test_modules_without_the_protocol_are_discovered(tmp_path):
    plain = PlainEmbeddingModel()
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    make_trainer(tmp_path, [callback], max_steps=0).fit(plain, token_loader(vocab_size=12))
    assert list(callback.reports) == ["body.word_embeddings"]
    assert torch.all(plain.body.word_embeddings.weight == 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"source": "glorot"}, r"unknown source 'glorot'; known schemes: he, hf, log_n_over_d, normal:<arg>"),
        ({"source": "normal:-0.1"}, r"std must be a finite number ≥ 0, got -0.1"),
        ({"source": "normal:inf"}, r"std must be a finite number"),
        ({"standardize": -1.0}, r"finite std > 0"),
        ({"standardize": "xaviar"}, r"standardize='xaviar' is not a scheme \(he, hf.*unknown source 'xaviar'"),
        (
            {"transforms": ["rotate"]},
            r"unknown transform 'rotate'; known transforms: center, match:<arg>, remove_top\[:<arg>\], scale:<arg>, "
            r"shuffle",
        ),
        ({"standardize": "xavier", "match": 0.3}, r"contradictory options: 'standardize' and 'match'"),
        (
            {"transforms": ["standardize:hf"], "standardize": "xavier"},
            r"contradictory options: transforms=\['standardize",
        ),
        (
            {"slots": {"encoder": {"sorce": "xavier"}}},
            r"unknown options for slot 'encoder' \['sorce'\]; valid options: source",
        ),
        ({"seed": -3}, r"seed must be a non-negative integer"),
        ({"source": "xavier", "source_options": {"oov": "zeros"}}, r"random scheme 'xavier' takes no source options"),
    ],
)
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        EmbeddingInitCallback(**options)


@pytest.mark.parametrize(
    ("model_factory", "options", "message"),
    [
        (TwoSlotHost, {"slots": ["encoder", "middle"]}, r"unknown slot 'middle'; known slots: encoder, decoder"),
        (NoEmbeddingModel, {}, r"NoEmbeddingModel has no embedding tables"),
        (TwoSlotHost, {"trainable": "pretrained_rows"}, r"contradictory options: trainable='pretrained_rows'"),
        (TwoSlotHost, {"trainable": "sometimes"}, r"unknown trainable='sometimes'; choose one of"),
        (
            TwoSlotHost,
            {"source": BrokenSource("nan")},
            r"1 rows contain NaN or inf \(first rows: \[3\]\); nothing was written",
        ),
        (TwoSlotHost, {"source": BrokenSource("inf")}, r"rows contain NaN or inf"),
        (
            TwoSlotHost,
            {"source": BrokenSource("shape")},
            r"built a matrix of shape \(11, 16\) for a table of shape \(10, 16\)",
        ),
        (TwoSlotHost, {"source": BrokenSource("coverage")}, r"covers none of the slot's 10 tokens"),
        (TwoSlotHost, {"slots": {"encoder": None, "decoder": {"source": BrokenSource("nan")}}}, r"slot 'decoder'"),
    ],
)
def test_bad_input_at_setup_raises_before_any_weight_changes(tmp_path, model_factory, options, message):
    model = model_factory()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with pytest.raises(ValueError, match=message):
        make_trainer(tmp_path, [EmbeddingInitCallback(verbose=False, **options)]).fit(model, token_loader())
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]), name
        assert parameter.requires_grad


class AdamWHost(TwoSlotHost):
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.1, weight_decay=0.1)


def test_pretrained_rows_stay_frozen_under_decoupled_weight_decay(tmp_path):
    model = AdamWHost()
    callback = EmbeddingInitCallback(source=EvenRowsSource(), trainable="pretrained_rows", seed=0, verbose=False)
    make_trainer(tmp_path, [callback], max_steps=4).fit(model, token_loader())
    rows = torch.arange(len(VOCAB))
    even = (rows % 2 == 0) & (rows > 0)
    table = model.encoder_embedding.weight.detach()
    assert torch.equal(table[even], (0.5 + rows[even].float() / 100).unsqueeze(1).expand(-1, 16))
    reference = TwoSlotHost()
    initialize_embeddings(reference, source=EvenRowsSource(), seed=0)
    assert not torch.allclose(table[rows % 2 == 1], reference.encoder_embedding.weight[rows % 2 == 1])


def test_a_reused_callback_keeps_each_models_own_frozen_rows(tmp_path):
    callback = EmbeddingInitCallback(source=EvenRowsSource(), trainable="pretrained_rows", seed=0, verbose=False)
    first, second = TwoSlotHost(lr=0.5), TwoSlotHost(vocab_size=12, lr=0.5)
    make_trainer(tmp_path, [callback], max_steps=1).fit(first, token_loader())
    make_trainer(tmp_path, [callback], max_steps=1).fit(second, token_loader(vocab_size=12))
    frozen = first.encoder_embedding.weight.detach()[2].clone()
    make_trainer(tmp_path, [callback], max_steps=2).fit(first, token_loader())
    assert torch.equal(first.encoder_embedding.weight.detach()[2], frozen)
