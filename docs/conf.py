"""Sphinx configuration of the lightning_embinit documentation site (``make docs``).

The pages are MyST Markdown (``docs/*.md``), the API reference comes from the docstrings (autodoc +
autosummary, ``docs/api/``), and the notebooks of ``examples/notebooks/`` are copied into the git-ignored
``docs/notebooks/`` at the start of every build and executed by myst-nb at the small scale
(``EMBINIT_NOTEBOOK_SCALE=ci``), their outputs cached in ``docs/_build/.jupyter_cache``. How to write pages
and mark code blocks: ``docs/contributing.md``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
NOTEBOOKS_SOURCE = ROOT / "examples" / "notebooks"
NOTEBOOKS_COPY = DOCS / "notebooks"  # git-ignored; refreshed from NOTEBOOKS_SOURCE by every build
NOTEBOOKS_PLACEHOLDER = "@NOTEBOOKS@"  # replaced in notebooks.md by the toctree entries of the notebooks found
RESULTS_PLACEHOLDER = "@RESULTS@"  # replaced in index.md by "results" once docs/results.md exists

sys.path.insert(0, str(DOCS / "_ext"))  # embinit_cli_parsers, for sphinx-argparse

# notebooks run at the small scale at build time, unless the caller chose another
os.environ.setdefault("EMBINIT_NOTEBOOK_SCALE", "ci")
os.environ.setdefault("EMBINIT_SHARED_DATA", str(ROOT.parent / "shared" / "data"))

from lightning_embinit import __version__  # noqa: E402  (after the environment above)

project = "lightning_embinit"
author = "the lightning_embinit authors"
copyright = "the lightning_embinit authors"  # noqa: A001  (a Sphinx setting)
version = release = __version__

extensions = [
    "myst_nb",  # MyST Markdown pages and Jupyter notebooks (it loads myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinxarg.ext",
    "sphinxcontrib.mermaid",
]

# notebooks/*/** and notebooks/*.md: what the notebooks write while they run (runs, reports) is not a page
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "notebooks/*/**", "notebooks/*.md", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
root_doc = "index"

# --- warnings: `make docs` runs with -W --keep-going, so each of these fails the build ------------------------
nitpicky = True
# myst tries every domain for a link it cannot resolve, and sphinx-argparse's domain cannot be tried; the broken
# link itself is still reported (myst.xref_missing)
suppress_warnings = ["myst.domains"]
# Third-party and standard-library types in signatures and docstrings: there is no intersphinx (the build is
# offline), so references into these packages cannot resolve. Everything of this package must.
_THIRD_PARTY = (
    r"(torch|lightning|lightning_fabric|pytorch_lightning|numpy|np|pandas|pd|scipy|gensim|transformers|datasets"
    r"|tokenizers|safetensors|huggingface_hub|jsonargparse|matplotlib|tensorboard|torchmetrics|sacrebleu|ray"
    r"|tqdm|rich|yaml|typing_extensions|pathlib|os|io|typing|collections|argparse|dataclasses|enum|logging"
    r"|concurrent|multiprocessing|subprocess|threading|warnings|zipfile|re|types|abc|contextlib|functools"
    r"|itertools|json|random|numbers|datetime|weakref|tempfile|mmap)(\..+)?"
)
nitpick_ignore_regex = [
    (r"py:.*", _THIRD_PARTY),
    (
        r"py:.*",
        r"(Tensor|Module|LightningModule|LightningDataModule|Trainer|Callback|DataLoader|Dataset|Sampler"
        r"|BatchSampler|Path|PathLike|Namespace|ArgumentParser|DataFrame|ndarray|Figure|Axes|dtype|device"
        r"|Generator|Iterator|Iterable|Mapping|MutableMapping|Sequence|Callable|Any|Literal|Self|TypeAlias)",
    ),
    (r"py:.*", r"(optional|callable|iterable|sequence|mapping|array-like|tensor|module)"),
    (r"py:.*", r"(nn|F|L|pl|dist)\..+"),  # torch.nn, torch.nn.functional, lightning as imported
    (r"py:.*", r"(Rich|TQDM)ProgressBar"),
    ("py:attr", "parser"),  # lightning_embinit.studies.plan.ConfigChecker: LightningCLI's attribute
    # private names are not part of the reference
    (r"py:.*", r"(.+\.)?_[A-Za-z]\w*(\..+)?"),
]

# --- MyST and notebooks ----------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4  # `page.md#a-heading` links are checked like any other cross-reference
myst_fence_as_directive = ["mermaid"]

nb_execution_mode = os.environ.get("EMBINIT_DOCS_EXECUTE", "cache")  # off | cache | force
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = int(os.environ.get("EMBINIT_DOCS_CELL_TIMEOUT", "600"))
nb_execution_raise_on_error = True  # a failing notebook fails the build
nb_execution_show_tb = True
nb_merge_streams = True

# --- API reference ---------------------------------------------------------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = True  # a package's page lists what it defines; re-exports are documented once,
autosummary_imported_members = False  # where they are defined
# a package that re-exports a function named like one of its modules (diagnostics.absorption) shadows the
# module for autosummary; the templates document such a name as the module (_templates/autosummary/function.rst)
autosummary_context = {
    "embinit_modules": sorted(
        info.name
        for info in pkgutil.walk_packages(importlib.import_module("lightning_embinit").__path__, "lightning_embinit.")
    )
}
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "show-inheritance": True,
    "ignore-module-all": True,
    "member-order": "bysource",
}
autodoc_inherit_docstrings = False  # Lightning's hook docstrings are Lightning's to document
autodoc_typehints = "signature"
autodoc_docstring_signature = False  # a dataclass without a docstring has its signature as __doc__, unevaluated
autodoc_class_signature = "mixed"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# --- HTML ------------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"lightning_embinit {version}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
pygments_style = "sphinx"
mermaid_version = "11.4.1"


def _sync_notebooks() -> list[str]:
    """Copy ``examples/notebooks/*.ipynb`` into ``docs/notebooks/`` (changed files only) and drop stale copies."""
    wanted = {path.name: path for path in sorted(NOTEBOOKS_SOURCE.glob("*.ipynb"))}
    NOTEBOOKS_COPY.mkdir(exist_ok=True)
    for stale in NOTEBOOKS_COPY.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for name, source in wanted.items():
        target = NOTEBOOKS_COPY / name
        if not target.exists() or target.read_bytes() != source.read_bytes():
            shutil.copy2(source, target)
    return [f"notebooks/{Path(name).stem}" for name in wanted]


NOTEBOOK_DOCS = _sync_notebooks()


def _generated_toctree_entries(app, docname: str, source: list[str]) -> None:
    """Fill the toctree entries that depend on what exists: the notebooks found (``notebooks.md``) and the
    studies' results page (``index.md``; ``results.md`` is written from the studies' runs)."""
    if docname == "notebooks":
        source[0] = source[0].replace(NOTEBOOKS_PLACEHOLDER, "\n".join(NOTEBOOK_DOCS))
    elif docname == "index":
        source[0] = source[0].replace(RESULTS_PLACEHOLDER, "results" if (DOCS / "results.md").exists() else "")


def _resolve(app, env, node, contnode):
    """``missing-reference``: a re-exported path, else a unique short name (see the two functions below)."""
    if node.get("refdomain") != "py":
        return None
    return _resolve_reexport(app, env, node, contnode) or _resolve_short_name(app, env, node, contnode)


def _resolve_short_name(app, env, node, contnode):
    """Resolve a short name (``:class:`Vocabulary```, ``:meth:`TextTokenizer.wordpiece```) that names one object.

    Python's domain looks a short name up only in the current module and class; docstrings name the package's
    objects from other modules too. A name that ends exactly one documented object's path (or one under the
    current class or module, when several do) resolves to it; an ambiguous or unknown name stays a warning.
    """
    target = node.get("reftarget", "")
    if not target or target.startswith("lightning_embinit."):
        return None
    objects = env.get_domain("py").objects
    suffix = "." + target
    candidates = [name for name in objects if name.endswith(suffix)]
    inherited = [name for name in _inherited_paths(node, target) if name in objects]
    if inherited:  # a method or attribute of the current class's bases
        candidates = inherited[:1]
    for scope in (node.get("py:class"), node.get("py:module")):
        if len(candidates) > 1 and scope:
            narrowed = [
                name
                for name in candidates
                if name.startswith(f"{node.get('py:module')}.{scope}.") or name.startswith(f"{scope}.")
            ]
            candidates = narrowed or candidates
    if len(candidates) != 1:
        return None
    node = node.deepcopy()
    node["reftarget"] = candidates[0]
    return env.get_domain("py").resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], candidates[0], node, contnode
    )


def _inherited_paths(node, target: str) -> list[str]:
    """``module.Base.target`` for each base of the class the reference sits in, nearest first."""
    module_name, class_name = node.get("py:module"), node.get("py:class")
    if not module_name or not class_name:
        return []
    try:
        cls = importlib.import_module(module_name)
        for part in class_name.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        return []
    return [f"{base.__module__}.{base.__qualname__}.{target}" for base in getattr(cls, "__mro__", ())]


def _resolve_reexport(app, env, node, contnode):
    """Resolve ``lightning_embinit.X`` / ``lightning_embinit.init.X`` … to where ``X`` is defined and documented.

    The package re-exports its names (``lightning_embinit.EmbeddingInitCallback`` is
    ``lightning_embinit.callbacks.embedding_init.EmbeddingInitCallback``); the reference documents each object
    once, under its defining module, and a reference by a re-exported path lands there.
    """
    target = node.get("reftarget", "")
    if not target.startswith("lightning_embinit."):
        return None
    module_name, _, attribute = target.rpartition(".")
    try:
        owner = importlib.import_module(module_name)
        obj = getattr(owner, attribute)
    except (ImportError, AttributeError):
        return _resolve_member(app, env, node, contnode, target)
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or f"{module}.{qualname}" == target:
        return None
    node = node.deepcopy()
    node["reftarget"] = f"{module}.{qualname}"
    return env.get_domain("py").resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], node["reftarget"], node, contnode
    )


def _resolve_member(app, env, node, contnode, target):
    """``lightning_embinit.callbacks.EmbeddingInitCallback.initialize``: a method reached through a re-export."""
    owner_path, _, member = target.rpartition(".")
    module_name, _, class_name = owner_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError):
        return None
    module = getattr(cls, "__module__", None)
    if not module or not isinstance(cls, type) or f"{module}.{cls.__qualname__}" == owner_path:
        return None
    node = node.deepcopy()
    node["reftarget"] = f"{module}.{cls.__qualname__}.{member}"
    return env.get_domain("py").resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], node["reftarget"], node, contnode
    )


_PROSE_DOCSTRINGS: dict[tuple[str, str], list[str]] = {}


def _keep_attribute_prose(app, what, name, obj, options, lines):
    """Before napoleon: remember the docstring of an attribute, property or module constant.

    Napoleon reads the first line of such a docstring as ``type: description``; here they are prose ("The
    feed-forward width: ..."), so the text is put back as written after napoleon ran (below).
    """
    if what in ("attribute", "data", "property"):
        _PROSE_DOCSTRINGS[(what, name)] = list(lines)


def _drop_dataclass_signature_doc(app, what, name, obj, options, lines):
    """A dataclass without a docstring gets ``Name(field: 'type', ...)`` as ``__doc__``: not documentation."""
    if what == "class" and dataclasses.is_dataclass(obj) and (obj.__doc__ or "").startswith(f"{obj.__name__}("):
        lines[:] = []


def _factory_defaults(app, what, name, obj, options, signature, return_annotation):
    """A dataclass field with ``default_factory`` shows as ``=<factory>``, which no signature parser reads:
    ``= ...``."""
    if signature and "<factory>" in signature:
        return signature.replace("=<factory>", "=...").replace("<factory>", "..."), return_annotation
    return None


def _restore_attribute_prose(app, what, name, obj, options, lines):
    kept = _PROSE_DOCSTRINGS.pop((what, name), None)
    if kept is not None:
        lines[:] = kept


def setup(app):
    app.connect("autodoc-process-docstring", _keep_attribute_prose, priority=100)
    app.connect("autodoc-process-docstring", _restore_attribute_prose, priority=900)
    app.connect("autodoc-process-docstring", _drop_dataclass_signature_doc)
    app.connect("autodoc-process-signature", _factory_defaults)
    app.connect("source-read", _generated_toctree_entries)
    app.connect("missing-reference", _resolve)
    return {"parallel_read_safe": True}
