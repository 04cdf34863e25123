"""Several models in one LightningModule (a frozen pre-trained teacher beside a student, for distillation), and tables
on the meta device: a frozen table is written only when named, several trainable models without ``slots=`` are
refused before anything is written, the report states trainability as it is, the variance monitor leaves a frozen
teacher out, and a meta-device table is named with what to do instead of torch's bare ``item()`` error."""

from __future__ import annotations

import pytest
import torch
import transformers as T
from lightning.pytorch import LightningModule

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor, InitialLossMonitor, initialize_embeddings
from lightning_embinit.diagnostics.initial_loss import tied_initial_loss
from tests.host_models import make_trainer

TEACHER, STUDENT = "teacher.transformer.wte", "student.transformer.wte"


def gpt2(seed: int) -> T.GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = T.GPT2Config(vocab_size=60, n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=0, eos_token_id=0)
    return T.GPT2LMHeadModel(config)


class Distillation(LightningModule):
    """A pre-trained teacher and a student; the teacher frozen unless ``freeze_teacher=False`` (then only the
    optimizer, which holds the student's parameters alone, keeps it still)."""

    def __init__(self, freeze_teacher: bool = True) -> None:
        super().__init__()
        self.teacher, self.student = gpt2(0), gpt2(1)
        if freeze_teacher:
            self.teacher.requires_grad_(False)

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        with torch.no_grad():
            target = self.teacher(ids).logits.softmax(-1)
        logits = self.student(ids).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(0, 1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.student.parameters(), lr=0.1)


def state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def test_a_frozen_teacher_is_left_alone_and_the_student_written():
    model = Distillation()
    teacher, student = state(model.teacher), model.student.transformer.wte.weight.detach().clone()
    callback = EmbeddingInitCallback(source="normal:0.5", seed=0, verbose=False)
    with pytest.warns(UserWarning, match=rf"slot '{TEACHER}' is frozen \(requires_grad=False\): left as it is"):
        reports = callback.initialize(model)
    assert list(reports) == [STUDENT] and reports[STUDENT]["trainable"] is True
    assert all(torch.equal(tensor, model.teacher.state_dict()[name]) for name, tensor in teacher.items())
    assert not torch.equal(model.student.transformer.wte.weight, student)
    assert model.student.transformer.wte.weight.std().item() == pytest.approx(0.5, rel=0.05)


def test_several_trainable_models_without_slots_are_refused_before_anything_is_written():
    model = Distillation(freeze_teacher=False)
    before = state(model)
    with pytest.raises(ValueError) as raised:
        EmbeddingInitCallback(source="xavier", seed=0, verbose=False).initialize(model)
    message = str(raised.value)
    assert "Distillation holds 2 models with trainable token tables" in message
    assert f"teacher (GPT2LMHeadModel: {TEACHER})" in message and f"student (GPT2LMHeadModel: {STUDENT})" in message
    assert "slots=" in message and "requires_grad_(False)" in message and "nothing was written" in message
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in before.items())
    reports = initialize_embeddings(model, source="xavier", slots=[STUDENT])
    assert list(reports) == [STUDENT] and torch.equal(model.teacher.transformer.wte.weight, before[f"{TEACHER}.weight"])


def test_a_named_frozen_table_is_written_and_reported_as_frozen():
    model = Distillation()
    before = model.teacher.transformer.wte.weight.detach().clone()
    reports = EmbeddingInitCallback(source="ones", slots=[TEACHER, STUDENT], verbose=False).initialize(model)
    assert torch.equal(model.teacher.transformer.wte.weight, torch.ones_like(before))  # named: written
    assert not model.teacher.transformer.wte.weight.requires_grad  # and never unfrozen
    assert reports[TEACHER]["trainable"] is False and reports[STUDENT]["trainable"] is True
    frozen = initialize_embeddings(gpt2(2), source="xavier", trainable=False)
    assert next(iter(frozen.values()))["trainable"] is False


def test_a_model_whose_tables_are_all_frozen_needs_them_named():
    model = gpt2(0).requires_grad_(False)
    before = model.transformer.wte.weight.detach().clone()
    with pytest.raises(
        ValueError, match=r"every embedding table of GPT2LMHeadModel is frozen .*transformer\.wte.*slots="
    ):
        initialize_embeddings(model, source="ones")
    assert torch.equal(model.transformer.wte.weight, before)


def test_a_fit_writes_the_student_and_the_monitors_measure_it_alone(tmp_path):
    model = Distillation()
    teacher = model.teacher.transformer.wte.weight.detach().clone()
    ids = torch.randint(0, 60, (8, 6), generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=4)
    init = EmbeddingInitCallback(source="normal:0.5", seed=0, verbose=False)
    monitor = EmbeddingVarianceMonitor(every_n_steps=None, figures=False)
    named = EmbeddingVarianceMonitor(slots=[TEACHER], every_n_steps=None, figures=False, prefix="teacher")
    loss = InitialLossMonitor(warn=False)
    with pytest.warns(UserWarning, match=f"slot '{TEACHER}' is frozen"):
        make_trainer(tmp_path, [init, monitor, named, loss], max_steps=2).fit(model, data)
    assert list(init.reports) == [STUDENT] and torch.equal(model.teacher.transformer.wte.weight, teacher)
    assert list(monitor.latest) == [STUDENT] and list(named.latest) == [TEACHER]
    assert named.latest[TEACHER]["std"] == pytest.approx(float(teacher.double().std(unbiased=False)), rel=1e-5)
    # the student's tied table (σ ≈ 0.5: ln(e^{16σ} + 59) ≈ 8), not the teacher's (σ ≈ 0.02: ≈ 4.1)
    assert loss.predicted == pytest.approx(tied_initial_loss(60, 16, init.reports[STUDENT]["std"]), rel=1e-6)


def test_the_monitor_measures_every_model_when_each_trains():
    model = Distillation(freeze_teacher=False)
    assert list(EmbeddingVarianceMonitor(figures=False).measure(model)) == [TEACHER, STUDENT]


def test_a_table_on_the_meta_device_is_named_before_anything_is_written():
    model = torch.nn.Module()
    model.real = torch.nn.Embedding(10, 4)
    with torch.device("meta"):
        model.lazy = torch.nn.Embedding(10, 4)
    before = model.real.weight.detach().clone()
    expected = r"slot 'lazy' is on the meta device .* nothing to {} yet: materialize .*configure_model"
    with pytest.raises(ValueError, match=expected.format("write")):
        EmbeddingInitCallback(source="ones", verbose=False).initialize(model)
    assert torch.equal(model.real.weight, before)
    with pytest.raises(ValueError, match=expected.format("measure")):
        EmbeddingVarianceMonitor(figures=False).measure(model)
    with torch.device("meta"):
        lazy = gpt2(0)
    with pytest.raises(ValueError, match=r"slot 'transformer\.wte' is on the meta device"):
        EmbeddingInitCallback(source="xavier", verbose=False).initialize(lazy)
