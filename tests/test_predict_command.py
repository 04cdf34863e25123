"""``embinit predict --config … --ckpt_path … --output FILE``: Trainer.predict over the datamodule's predict data, each
system's ``predict_step`` records written by PredictionWriter, line for line what ``translate``, ``generate`` and
``classify`` give on the same text (one path), complete and in order, also from 2 DDP processes."""

from __future__ import annotations

import json

import lightning as L
import pytest
import yaml

from lightning_embinit.callbacks import PredictionWriter
from lightning_embinit.callbacks.prediction_writer import prediction_line
from lightning_embinit.commands import main as cli
from lightning_embinit.data import ClassificationDataModule, LanguageModelDataModule
from lightning_embinit.text.text_tokenizer import WordTokenizer
from tests.shared_data import require_shared_data
from tests.translation_helpers import multi30k_data
from tests.two_processes import ddp_strategy
from tests.use_checkpoints import gpt2_checkpoint, use_checkpoints

PROMPTS = ["The cat", "", "A dog ran", "Zebras", "the mat", "Park", "cat sat on"]
WORDS = WordTokenizer("regex", lowercase=False)  # as the tiny LM's data split its text
TRAINER = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return use_checkpoints(tmp_path_factory)


def config(tmp_path, model: str, data: str, **data_args) -> str:
    """A predict config: the model's class (the checkpoint gives its arguments) and a datamodule."""
    path = tmp_path / "predict.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": {"class_path": f"lightning_embinit.models.{model}"},
                "data": {"class_path": f"lightning_embinit.data.{data}", "init_args": data_args},
                "trainer": {**TRAINER, "default_root_dir": str(tmp_path)},
            }
        )
    )
    return str(path)


def predict(args, capsys) -> tuple[int, str]:
    try:
        status = cli.main(["predict", *args])
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err


def prompts_file(tmp_path) -> str:
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return str(path)


def test_predict_writes_a_language_models_continuations_in_order(checkpoints, tmp_path, capsys):
    path, model = checkpoints["lm"]
    cfg = config(tmp_path, "TiedEmbeddingLM", "LanguageModelDataModule", lowercase=False, batch_size=2)
    out = tmp_path / "continuations.txt"
    args = ["--config", cfg, "--ckpt_path", path, "--data.init_args.predict_files", prompts_file(tmp_path)]
    status, err = predict([*args, "--output", str(out)], capsys)
    assert status == 0, err
    expected = model.generate(PROMPTS, tokenize=WORDS)
    assert out.read_text(encoding="utf-8").split("\n") == [*expected, ""] and expected[1] == ""


def test_predict_translates_the_test_split_as_translate_does(checkpoints, tmp_path, capsys):
    path, model = checkpoints["seq2seq"]
    data = {"data_dir": str(require_shared_data("multi30k")), "max_examples": 16, "min_freq": 1, "seed": 0}
    cfg = config(tmp_path, "TransformerSeq2Seq", "TranslationDataModule", **data, batch_size=4)
    out = tmp_path / "translations.tsv"
    status, err = predict(["--config", cfg, "--ckpt_path", path, "--output", str(out), "--format", "tsv"], capsys)
    assert status == 0, err
    sources = multi30k_data(examples=16).split_texts("test")[0]
    expected = [f"{t}\t{s}" for t, s in zip(model.translate(sources), sources)]
    assert out.read_text(encoding="utf-8").splitlines() == expected and len(expected) == 16


def test_predict_classifies_the_validation_split_as_classify_does(checkpoints, tmp_path, capsys):
    path, model = checkpoints["classifier"]
    data = {"dataset": "sst2", "data_dir": str(require_shared_data("sst2")), "max_examples": 12, "max_length": 64}
    cfg = config(tmp_path, "TransformerClassifier", "ClassificationDataModule", **data, eval_batch_size=5)
    out = tmp_path / "labels.jsonl"
    status, err = predict(["--config", cfg, "--ckpt_path", path, "--output", str(out), "--format", "jsonl"], capsys)
    assert status == 0, err
    reference = ClassificationDataModule(**data)
    texts = reference.split_texts(reference.val_dataloader_names[0])[0]
    expected = [prediction_line(record, "jsonl") for record in model.classify_texts(texts)]
    rows = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(row)["text"] for row in rows] == texts and len(texts) == 12
    for row, line in zip(rows, expected):
        got, want = json.loads(row), json.loads(line)
        assert got["label"] == want["label"] == model.classify([got["text"]])[0]
        assert list(got["probabilities"].values()) == pytest.approx(list(want["probabilities"].values()), abs=1e-6)


def test_the_reinforced_model_and_a_hugging_face_lm_predict_as_translate_and_generate(
    checkpoints, tmp_path_factory, tmp_path
):
    _, reinforced = checkpoints["reinforced"]
    translation = multi30k_data(examples=16, batch_size=4)
    out = tmp_path / "reinforced.txt"
    trainer = L.Trainer(**TRAINER, callbacks=[PredictionWriter(str(out))], default_root_dir=tmp_path)
    returned = trainer.predict(reinforced, datamodule=translation)
    sources = translation.split_texts("test")[0]
    assert out.read_text(encoding="utf-8").splitlines() == reinforced.translate(sources)
    assert sorted(r["index"] for batch in returned for r in batch) == list(range(16))  # the records, from Python
    _, gpt2 = gpt2_checkpoint(tmp_path_factory)
    prompts = ["the cat sat", "", "a dog", "the park"]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    lm_data = LanguageModelDataModule(
        tokenizer=gpt2.hparams.tokenizer, predict_files=str(tmp_path / "prompts.txt"), batch_size=3
    )
    out = tmp_path / "gpt2.txt"
    trainer = L.Trainer(**TRAINER, callbacks=[PredictionWriter(str(out))], default_root_dir=tmp_path)
    trainer.predict(gpt2, datamodule=lm_data, return_predictions=False)
    assert out.read_text(encoding="utf-8").split("\n") == [*gpt2.generate(prompts), ""]


@pytest.mark.ddp
@pytest.mark.timeout(300)
def test_two_processes_write_every_prediction_once_in_order(checkpoints, tmp_path):
    _, model = checkpoints["lm"]
    prompts = [*PROMPTS, "the cat ran", "A"]  # 9 prompts in batches of 2: 5 batches, uneven over 2 ranks
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    data = LanguageModelDataModule(
        vocabulary=model.vocabulary, lowercase=False, predict_files=str(tmp_path / "prompts.txt"), batch_size=2
    )
    out = tmp_path / "ddp.txt"
    trainer = L.Trainer(
        **TRAINER, devices=2, strategy=ddp_strategy(), callbacks=[PredictionWriter(str(out))], default_root_dir=tmp_path
    )
    trainer.predict(model, datamodule=data, return_predictions=False)
    assert out.read_text(encoding="utf-8").split("\n") == [*model.generate(prompts, tokenize=WORDS), ""]


def test_predict_refuses_a_missing_or_unwritable_output_before_running(checkpoints, tmp_path, capsys):
    path, _ = checkpoints["lm"]
    prompts = prompts_file(tmp_path)
    cfg = config(tmp_path, "TiedEmbeddingLM", "LanguageModelDataModule", predict_files=prompts)
    base = ["--config", cfg, "--ckpt_path", path]
    for extra, problem in (
        ([], "give --output FILE: the file the predictions are written to"),
        (["--output", str(tmp_path)], f"--output {tmp_path} is a directory"),
        (["--output", str(tmp_path / "no" / "p.txt")], "does not exist; create it"),
        (["--output", cfg], f"--output {cfg} is the same file as --config {cfg}"),
        (["--output", path], "is the same file as --ckpt_path"),
        (["--data.init_args.predict_files", prompts, "--output", prompts], "is the same file as --data.init_args.pre"),
        (["--output", str(tmp_path / "p.txt"), "--format", "csv"], "argument --format: invalid choice: 'csv'"),
        (
            ["--outpu", str(tmp_path / "p.txt")],
            "give --output FILE: the file the predictions are written to (not --outpu)",
        ),
    ):
        status, err = predict([*base, *extra], capsys)
        lines = [line for line in err.splitlines() if "error" in line]
        assert status == 2 and len(lines) == 1 and problem in lines[0], err
    assert not (tmp_path / "p.txt").exists() and "predict_files" in open(cfg).read()
    _, model = checkpoints["lm"]  # the prompts named in the config only: the writer refuses them at setup
    data = LanguageModelDataModule(vocabulary=model.vocabulary, lowercase=False, predict_files=prompts)
    trainer = L.Trainer(**TRAINER, callbacks=[PredictionWriter(prompts)], default_root_dir=tmp_path)
    with pytest.raises(ValueError, match=f"output_path {prompts} is the datamodule's predict_files {prompts}"):
        trainer.predict(model, datamodule=data)
    assert open(prompts, encoding="utf-8").read() == "\n".join(PROMPTS) + "\n"


def test_the_predict_help_names_the_output_option(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["predict", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit.value.code == 0 and "writes the model's predictions to --output FILE (required)" in out
