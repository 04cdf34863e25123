"""Errors that name the file (or token id) and the fix (issue 7 §5, §7, §8); weights untouched in every case."""

from __future__ import annotations

import os
import pickle
import stat

import numpy as np
import pytest
import torch

from lightning_embinit import EmbeddingInitCallback, LanguageModelDataModule, TiedEmbeddingLM
from lightning_embinit.callbacks.learning_speed import LearningSpeedMonitor
from lightning_embinit.commands.inspect import main as inspect_main
from lightning_embinit.commands.inspect_models import ShapeModel
from lightning_embinit.init.projection import fit_projection
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.sources import SourceRequest, resolve_source, vector_cache
from lightning_embinit.init.sources.static import normalize_format
from lightning_embinit.init.sources.vector_file import check_policies
from tests.test_sources_hf import save_bert

SPECIALS = {"pad": "<pad>", "unk": "<unk>"}


def request_for(tokens, dim):
    return SourceRequest(
        "src",
        len(tokens),
        dim,
        tokens=list(tokens),
        special_tokens=SPECIALS,
        generator=torch.Generator().manual_seed(0),
    )


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(vector_cache, "_WARNED", set())


def test_word2vec_binary_header_with_an_absurd_count(tmp_path):
    path = tmp_path / "huge.bin"
    path.write_bytes(b"1000000000000 8\n" + b"the " + np.ones(8, np.float32).tobytes())
    with pytest.raises(
        ValueError,
        match=r"huge.bin: the header announces 1000000000000 vectors of dimension 8 .* but "
        r"the file has 52 bytes: the header is wrong or the file is truncated",
    ):
        resolve_source(f"file:{path}", format="word2vec_binary").build(request_for(["the"], 8))


def test_truncated_fasttext_bin(tmp_path):
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [["the", "cat", "sat", "on", "the", "mat"]] * 20
    model = FastText(sentences=sentences, vector_size=8, min_count=1, epochs=1, seed=1, workers=1, bucket=1000)
    path = tmp_path / "model.bin"
    save_facebook_model(model, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        ValueError, match=r"model.bin: not a readable fastText .bin model \(.*\); the file is truncated"
    ):
        resolve_source(f"file:{path}").build(request_for(["the"], 8))


@pytest.fixture
def bert_dir(tmp_path):
    directory = tmp_path / "bert"
    save_bert(str(directory))
    return directory


def test_truncated_safetensors_names_the_file(bert_dir):
    weights = bert_dir / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match=rf"{weights}: .*truncated or damaged — download it again"):
        resolve_source(f"hf:{bert_dir}").build(request_for(["the", "man"], 16))
    weights.write_bytes(data[:40])  # not even the header survives
    with pytest.raises(ValueError, match=rf"{weights}: .*(truncated|not a safetensors file)"):
        resolve_source(f"hf:{bert_dir}").build(request_for(["the", "man"], 16))


class Payload:
    """A pickled object that would run code when unpickled without weights_only."""

    def __reduce__(self):
        return (os.getcwd, ())


def test_pickle_payload_in_pytorch_model_bin_is_refused_with_a_way_out(bert_dir):
    state = {"embeddings.word_embeddings.weight": torch.zeros(64, 16), "payload": Payload()}
    (bert_dir / "model.safetensors").unlink()
    torch.save(state, bert_dir / "pytorch_model.bin", pickle_protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(
        ValueError,
        match=r"pytorch_model.bin: refused: the file holds Python objects beyond tensors.*"
        r"save_pretrained\(\.\.\., safe_serialization=True\)",
    ) as error:
        resolve_source(f"hf:{bert_dir}").build(request_for(["the"], 16))
    assert "weights_only=False" not in str(error.value)


@pytest.mark.parametrize("spec", ["hf:/no/such/dir", "hf:./no/such/dir"])
def test_a_missing_model_directory_fails_when_the_callback_is_created(spec):
    with pytest.raises(ValueError, match=r"directory .*no/such/dir not found; give a Hugging Face model directory"):
        EmbeddingInitCallback(source=spec)


def test_paths_that_are_directories_or_missing_say_so(tmp_path):
    with pytest.raises(
        ValueError,
        match=rf"{tmp_path} is a directory, not a vector file \(for a Hugging Face model "
        rf"directory use source='hf:{tmp_path}'\)",
    ):
        EmbeddingInitCallback(source=f"file:{tmp_path}")
    with pytest.raises(ValueError, match=r"source '/no/such/x.vec': no such file or directory") as error:
        EmbeddingInitCallback(source="/no/such/x.vec")
    assert "known schemes" not in str(error.value)


def test_training_text_that_is_not_utf8_names_the_file_and_the_option(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("le café est très bon\n".encode("latin-1") * 50)
    datamodule = LanguageModelDataModule(train_files=str(path), seq_len=4)
    with pytest.raises(ValueError, match=rf"training file {path} is not valid utf-8 text .*encoding='latin-1'"):
        datamodule.setup("fit")
    assert LanguageModelDataModule(train_files=str(path), seq_len=4, encoding="latin-1", min_freq=1).vocabulary


def test_a_token_id_outside_the_vocabulary_is_named():
    model = TiedEmbeddingLM(vocab_size=50, architecture={"d_model": 16, "num_heads": 2, "num_layers": 1, "max_len": 8})
    ids = torch.tensor([[1, 2, 3, 57]])
    with pytest.raises(
        ValueError,
        match=r"token id 57 is outside the embedding's vocabulary of 50 tokens "
        r"\(valid ids: 0 … 49\); 1 id\(s\) out of range",
    ):
        model(ids)


def test_a_read_only_cache_directory_warns_once_and_works_without_it(tmp_path, monkeypatch):
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() == 0:  # root writes anywhere: make the probe fail as it does for other users

        def denied(*args, **kwargs):
            raise PermissionError(13, "Permission denied", str(read_only))

        monkeypatch.setattr(vector_cache.tempfile, "NamedTemporaryFile", denied)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(read_only))
    check_works_without_cache(tmp_path, str(read_only))


def test_a_cache_directory_that_cannot_be_created_warns_once_and_works_without_it(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(blocker / "cache"))
    check_works_without_cache(tmp_path, str(blocker / "cache"))


def check_works_without_cache(tmp_path, directory):
    vectors = tmp_path / "v.txt"
    vectors.write_text("2 3\nthe 1 2 3\ncat 4 5 6\n", encoding="utf-8")
    with pytest.warns(
        UserWarning,
        match=rf"cache directory {directory} \(from the environment variable "
        r"EMBINIT_CACHE_DIR\) cannot be used: .*without the cache \(warned once\)",
    ):
        built = resolve_source(f"file:{vectors}").build(request_for(["the", "cat"], 3))
    assert built.weight.tolist() == [[1, 2, 3], [4, 5, 6]]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = resolve_source(f"file:{vectors}").build(request_for(["cat"], 3))
    assert again.weight.tolist() == [[4, 5, 6]]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: fit_projection("lda", torch.zeros(3, 3), 2),
            "unknown projection 'lda'; choose one of: pca, random_orthogonal",
        ),
        (lambda: normalize_format("csv"), "unknown format='csv'; choose one of: auto, "),
        (lambda: check_policies("drop", "replace"), "unknown on_bad_line='drop'; choose one of: error, skip, warn"),
        (
            lambda: check_policies("skip", "loose"),
            "unknown encoding_errors='loose'; choose one of: replace, strict, ignore, backslashreplace",
        ),
        (
            lambda: LearningSpeedMonitor("x", 1.0, check_on="epoch"),
            "unknown check_on 'epoch'; choose one of: validation, train_step",
        ),
        (
            lambda: LearningSpeedMonitor("x", 1.0, mode="up"),
            "unknown mode 'up'; choose one of: max, min (max: higher is better; min: lower is better)",
        ),
        (
            lambda: InitRecipe(trainable=1).check(slot="enc"),
            "slot 'enc': unknown trainable=1; choose one of: True, False, pretrained_rows",
        ),
        (
            lambda: ShapeModel(10, 4, positional="learned"),
            "unknown --positional 'learned'; choose one of: sinusoidal, none "
            "(a learned table is inspected through --config)",
        ),
    ],
)
def test_a_bad_choice_names_the_value_and_every_valid_choice(make, message):
    with pytest.raises(ValueError) as raised:
        make()
    assert str(raised.value).startswith(message)


def test_inspect_names_a_bad_trainable_value_and_the_choices(capsys):
    with pytest.raises(SystemExit):
        inspect_main(["--vocab-size", "10", "--dim", "4", "--trainable", "sometimes"])
    assert (
        "argument --trainable: unknown value 'sometimes'; choose one of: true, false, pretrained_rows"
        in capsys.readouterr().err
    )
