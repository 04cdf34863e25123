"""Every code block of the documentation (``docs/**/*.md``) and of ``README.md`` that claims to run, run.

The pages are read with Sybil's Markdown lexers; each fenced block is one test, named by file and line:

- ```` ```python ```` runs in this process, in one namespace per page (blocks run in page order);
- ```` ```bash ```` runs in ``bash -e -o pipefail``, with the virtualenv's ``bin`` first on ``PATH``;
- ```` ```yaml ```` must parse;
- a block with no language (printed output), ``text``, ``console``, ``mermaid`` or a MyST directive
  (```` ```{toctree} ````) is not code;
  any other language fails here, so that no new kind of block goes unrun unnoticed.

Every page runs in its own sandbox: a temporary directory laid out like the repository (``examples/``,
``benchmarks/``, ``.venv/`` linked in) beside ``../shared/data``, so relative paths work as written and what the
blocks write (``runs/``, ``lightning_logs/``, checkpoints) goes away with the sandbox.

Markers, HTML comments just before a block (invisible on the site and on GitHub; docs/contributing.md):

- ``<!-- skip: next "why" -->`` (Sybil's): an illustration, not run; the reason is required (checked below);
- ``<!-- invisible-code-block: python`` … ``-->`` (Sybil's; also ``bash``): setup the reader need not see;
- ``<!-- docs-test: env NAME=VALUE ... -->``: environment for the next block only, e.g.
  ``PL_TRAINER_FAST_DEV_RUN=1`` for a block that trains (one batch instead of the run the page describes);
- ``<!-- docs-test: replace "OLD" "NEW" -->``: the next block runs with OLD replaced by NEW (a small-scale
  stand-in for a long run; OLD must occur in the block, so the substitute cannot go stale);
- ``<!-- docs-test: slow -->``: the next block is ``@pytest.mark.slow``;
- ``<!-- docs-test: output [ignore "REGEX"]... [tolerance REL] -->`` before a ``text`` (or bare) block: the block is
  the output of the block above it — a ``bash`` block's stdout, what a ``python`` block printed — and is compared
  with it, in the test of that block: line by line, runs of spaces as one; lines matching an ``ignore`` regex
  (timings, paths) are left out on both sides; numbers compared to a relative ``tolerance`` (default: exactly,
  for runs that are deterministic at the docs-test scale). So the sample must be the docs-test scale's output:
  after a ``replace`` stand-in, the stand-in's.

A sample output after a ``bash`` or ``python`` block that is not compared (a run at a bigger scale than the docs
test's) says so in the text just before it: "output of an earlier run (DATE, lightning_embinit VERSION at COMMIT)"
(checked below).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from sybil import Document, Example, Region
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

from tests.shared_data import require_shared_data, shared_data_dir
from tests.warm_embinit import WarmEmbinit

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GENERATED = ("_build", "api/generated", "notebooks")  # written by `make docs`, not sources
PAGES = sorted(
    path
    for path in DOCS.rglob("*.md")
    if not any(path.relative_to(DOCS).as_posix().startswith(prefix + "/") for prefix in GENERATED)
) + [ROOT / "README.md"]

EXECUTED = ("python", "bash", "yaml")
NOT_CODE = ("", "text", "console", "mermaid")  # and MyST directives, ```{toctree} and the like
NEVER_RUN = re.compile(r"^\s*(make|pip|pip3|sudo)\s", re.MULTILINE)  # they change this environment (or recurse)
LONG_RUN = re.compile(r"--variant[ =](medium|full)\b")  # a study's medium or full variant: tens of minutes to days
BASH_TIMEOUT_S = 540  # under pytest-timeout's 600 s
PENDING = "__docs_test_pending__"
SANDBOX = "__docs_test_sandbox__"
OUTPUT = "__docs_test_output__"
EARLIER_RUN = re.compile(
    r"output of an earlier run \(\d{4}-\d{2}-\d{2}, lightning_embinit [0-9][^\s,()]* at [0-9a-f]{7,40}\)", re.IGNORECASE
)
"""The label of a sample output that the docs test does not compare (a run at a bigger scale)."""
WARM_EMBINIT = WarmEmbinit()
"""``embinit`` in the bash blocks forks from one preloaded process (``tests/warm_embinit.py``)."""
NUMBER = re.compile(r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


@dataclass
class OutputCheck:
    """``docs-test: output``: the lines to leave out and the numbers' relative tolerance."""

    ignore: list[re.Pattern[str]] = field(default_factory=list)
    tolerance: float = 0.0


@dataclass
class Pending:
    """What ``docs-test`` markers ask of the next block."""

    env: dict[str, str] = field(default_factory=dict)
    replacements: list[tuple[str, str]] = field(default_factory=list)
    slow: bool = False
    output: OutputCheck | None = None


@dataclass(frozen=True)
class Fence:
    """A fenced block that is not run: its language and its text."""

    language: str
    text: str


def parse_output_options(rest: list[str]) -> OutputCheck | None:
    """``ignore "REGEX"`` (repeatable) and ``tolerance REL`` → the check; None when malformed."""
    check = OutputCheck()
    if len(rest) % 2:
        return None
    for option, value in zip(rest[::2], rest[1::2]):
        if option == "ignore":
            check.ignore.append(re.compile(value))
        elif option == "tolerance" and NUMBER.fullmatch(value) and float(value) >= 0:
            check.tolerance = float(value)
        else:
            return None
    return check


def parse_directive(arguments: str) -> tuple[str, Any]:
    """``env A=1 B=2`` / ``replace "old" "new"`` / ``slow`` / ``output ...`` → (action, arguments), checked."""
    words = shlex.split(arguments)
    if not words:
        raise ValueError("empty docs-test marker")
    action, rest = words[0], words[1:]
    if action == "env" and rest and all("=" in word for word in rest):
        return action, rest
    if action == "replace" and len(rest) == 2 and rest[0]:
        return action, rest
    if action == "slow" and not rest:
        return action, rest
    if action == "output" and (check := parse_output_options(rest)) is not None:
        return action, check
    raise ValueError(
        f"bad docs-test marker {arguments!r}: use 'env NAME=VALUE ...', 'replace \"OLD\" \"NEW\"', 'slow' or "
        "'output [ignore \"REGEX\"]... [tolerance REL]'"
    )


def apply_directive(example: Example) -> None:
    action, rest = example.parsed
    pending = example.namespace.setdefault(PENDING, Pending())
    if action == "env":
        pending.env.update(word.split("=", 1) for word in rest)
    elif action == "replace":
        pending.replacements.append((rest[0], rest[1]))
    elif action == "output":
        pending.output = rest
    else:
        pending.slow = True


def comparable_lines(text: str, check: OutputCheck) -> list[str]:
    """The lines to compare: trailing spaces and ignored lines left out, runs of spaces as one, no blank ends."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    lines = [line for line in lines if not any(pattern.search(line) for pattern in check.ignore)]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def lines_agree(sample: str, output: str, tolerance: float) -> bool:
    """The same text between the numbers, and numbers equal within ``tolerance`` (relative; 0: the same digits)."""
    expected, actual = NUMBER.split(sample), NUMBER.split(output)
    if len(expected) != len(actual) or expected[::2] != actual[::2]:
        return False
    return all(
        a == b or (tolerance > 0 and math.isclose(float(a), float(b), rel_tol=tolerance))
        for a, b in zip(expected[1::2], actual[1::2])
    )


def check_output(example: Example, check: OutputCheck) -> None:
    """The sample block (``example``) against the output of the block run before it."""
    output = example.namespace.get(OUTPUT)
    if output is None:
        raise AssertionError(f"docs-test output at line {example.line}: no block ran before this sample")
    expected, actual = comparable_lines(example.parsed.text, check), comparable_lines(output, check)
    if len(expected) == len(actual) and all(lines_agree(e, a, check.tolerance) for e, a in zip(expected, actual)):
        return
    diff = "\n".join(difflib.unified_diff(expected, actual, "the sample", "the output", lineterm=""))
    raise AssertionError(
        f"the sample output at line {example.line} differs from the output of the block above it "
        f"(tolerance {check.tolerance}):\n{diff}\n--- the whole output:\n{output}"
    )


class DirectiveParser:
    """``<!-- docs-test: ... -->`` markers."""

    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer(directive="docs-test", arguments=".+?")

    def __call__(self, document: Document):
        for lexed in self.lexer(document):
            yield Region(lexed.start, lexed.end, parse_directive(lexed.lexemes["arguments"]), apply_directive)


def take_pending(example: Example) -> tuple[str, dict[str, str]]:
    """The block's source with its replacements made, and its environment; clears the markers."""
    pending = example.namespace.pop(PENDING, None) or Pending()
    source = str(example.parsed)
    for old, new in pending.replacements:
        if old not in source:
            raise AssertionError(f"docs-test replace: {old!r} does not occur in the block at line {example.line}")
        source = source.replace(old, new)
    return source, pending.env


class SetEnv:
    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.saved = env, {}

    def __enter__(self) -> None:
        self.saved = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc: Any) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_python(example: Example) -> None:
    source, env = take_pending(example)
    code = compile("\n" * example.line + source, example.path, "exec")  # tracebacks show the page's lines
    cwd = Path.cwd()
    os.chdir(example.namespace[SANDBOX])
    printed = io.StringIO()
    try:
        with SetEnv(env), contextlib.redirect_stdout(printed):
            exec(code, example.namespace)
    finally:
        os.chdir(cwd)
        example.namespace[OUTPUT] = printed.getvalue()


def run_bash(example: Example) -> None:
    source, env = take_pending(example)
    if NEVER_RUN.search(source):
        raise AssertionError(
            f"the bash block at line {example.line} runs make/pip/sudo, which the docs tests never do (make test "
            'would run this suite inside itself): mark it <!-- skip: next "why" -->'
        )
    if LONG_RUN.search(source):
        raise AssertionError(
            f"the bash block at line {example.line} runs a study's medium or full variant: mark it "
            '<!-- skip: next "why" --> or give it a small-scale stand-in (<!-- docs-test: replace ... -->)'
        )
    environment = dict(os.environ, **env)
    bin_dir = example.namespace[SANDBOX] / ".venv" / "bin"  # embinit there is the warm client (_link_venv)
    environment["PATH"] = f"{bin_dir}{os.pathsep}{environment.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", source],
        cwd=example.namespace[SANDBOX],
        env=environment,
        capture_output=True,
        text=True,
        timeout=BASH_TIMEOUT_S,
    )
    example.namespace[OUTPUT] = done.stdout
    if done.returncode:
        output = (done.stdout + done.stderr)[-4000:]
        raise AssertionError(f"bash block at line {example.line} exited with {done.returncode}:\n{output}")


def check_yaml(example: Example) -> None:
    source, _ = take_pending(example)
    yaml.safe_load(source)


def not_code(example: Example) -> None:
    """A block that is not run; with an ``output`` marker, the sample compared with what the block above printed."""
    pending = example.namespace.pop(PENDING, None)
    if pending is not None and pending.output is not None:
        check_output(example, pending.output)


class AnyFenceParser:
    """Every fenced block, with its language; the languages not executed are checked to be known."""

    def __init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE))

    def __call__(self, document: Document):
        for lexed in self.lexer(document):
            language = lexed.lexemes["language"].strip()
            if language not in EXECUTED:
                yield Region(lexed.start, lexed.end, Fence(language, lexed.lexemes["source"]), not_code)


PARSERS = [
    SkipParser(),
    DirectiveParser(),
    CodeBlockParser(language="python", evaluator=run_python),
    CodeBlockParser(language="bash", evaluator=run_bash),
    CodeBlockParser(language="yaml", evaluator=check_yaml),
    AnyFenceParser(),
]


def parse(page: Path) -> Document:
    return Document.parse(str(page), *PARSERS)


def is_block(example: Example) -> bool:
    return example.region.evaluator in (run_python, run_bash, check_yaml)


def is_invisible(example: Example) -> bool:
    """An ``invisible-code-block``: setup that runs as part of the next visible block's test."""
    return example.document.text.startswith("<!--", example.region.start)


def is_output_marker(example: Example) -> bool:
    return example.region.evaluator is apply_directive and example.parsed[0] == "output"


def block_groups(page: Path) -> list[tuple[int, bool, list[Example]]]:
    """(line, slow, examples): each runnable block with the markers before it, and its sample output (an ``output``
    marker right after it and the block that follows the marker)."""
    groups, waiting, slow, sample_open = [], [], False, False
    for example in parse(page).examples():
        if (
            groups
            and not waiting
            and (is_output_marker(example) or (sample_open and example.region.evaluator is not_code))
        ):
            groups[-1][2].append(example)
            sample_open = is_output_marker(example)
            continue
        sample_open = False
        waiting.append(example)
        if example.region.evaluator is apply_directive and example.parsed[0] == "slow":
            slow = True
        if is_block(example) and not is_invisible(example):
            groups.append((example.line, slow, waiting))
            waiting, slow = [], False
        elif example.region.evaluator is not_code:
            waiting, slow = [], False
    return groups


def block_params() -> list[Any]:
    params = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        for line, slow, examples in block_groups(page):
            marks = [pytest.mark.slow] if slow else []  # under xdist, a page runs on one worker (tests/conftest.py)
            params.append(pytest.param(examples, id=f"{name}:{line}", marks=marks))
    return params


_sandboxes: dict[str, Path] = {}


def _link_venv(venv: Path) -> None:
    """The virtualenv at ``venv`` (a block's ``.venv/bin/...`` and, first on its ``PATH``, its bare commands): links
    to this one's files, but ``bin/embinit`` is the warm client unless ``EMBINIT_DOCS_COLD`` is set."""
    if os.environ.get("EMBINIT_DOCS_COLD"):
        venv.symlink_to(Path(sys.prefix), target_is_directory=True)
        return
    venv.mkdir()
    for entry in Path(sys.prefix).iterdir():
        if entry.name != "bin":
            (venv / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (venv / "bin").mkdir()
    for entry in Path(sys.prefix, "bin").iterdir():
        target = Path(WARM_EMBINIT.bin_dir(), "embinit") if entry.name == "embinit" else entry
        (venv / "bin" / entry.name).symlink_to(target)


def sandbox_for(document: Document, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh copy of the repository's layout for one page: ``<tmp>/repo`` (the cwd) beside ``<tmp>/shared/data``."""
    if document.path not in _sandboxes:
        top = tmp_path_factory.mktemp("docs-page")
        (top / "shared").mkdir()
        (top / "shared" / "data").symlink_to(shared_data_dir().resolve(), target_is_directory=True)
        repo = top / "repo"
        repo.mkdir()
        for name in ("examples", "benchmarks"):
            (repo / name).symlink_to(ROOT / name, target_is_directory=True)
        _link_venv(repo / ".venv")
        _sandboxes[document.path] = repo
    return _sandboxes[document.path]


@pytest.mark.parametrize("examples", block_params())
def test_docs_block_runs(examples: list[Example], tmp_path_factory, monkeypatch) -> None:
    require_shared_data()
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(shared_data_dir().resolve()))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    document = examples[0].document
    document.namespace.setdefault(SANDBOX, sandbox_for(document, tmp_path_factory))
    for example in examples:
        example.evaluate()


def test_every_fenced_block_is_run_or_known_not_to_be_code() -> None:
    unknown = [
        f"{page.relative_to(ROOT)}:{example.line} ```{example.parsed}"
        for page in PAGES
        for example in parse(page).examples()
        if example.region.evaluator is not_code
        and example.parsed.language not in NOT_CODE
        and not example.parsed.language.startswith("{")
    ]
    assert not unknown, f"fenced blocks in a language the docs tests neither run nor know as output: {unknown}"


def test_every_skip_says_why() -> None:
    silent = [
        f"{page.relative_to(ROOT)}:{example.line}"
        for page in PAGES
        for example in parse(page).examples()
        if isinstance(example.parsed, tuple) and example.parsed[0] in ("next", "start") and not example.parsed[1]
    ]
    assert not silent, f'skip markers without a reason (write <!-- skip: next "why" -->): {silent}'


def test_markers_sit_right_before_a_block() -> None:
    """A docs-test marker that no block follows (a block deleted, a marker moved) is an error, not a no-op."""
    stray = []
    for page in PAGES:
        grouped = {example.region.start for _, _, examples in block_groups(page) for example in examples}
        waiting: list[Example] = []
        examples = list(parse(page).examples())
        for example, following in zip(examples, [*examples[1:], None]):
            if is_output_marker(example):
                sample_next = following is not None and following.region.evaluator is not_code
                if example.region.start not in grouped or not sample_next:  # not between a block and its sample
                    stray.append(f"{page.relative_to(ROOT)}:{example.line}")
            elif example.region.evaluator is apply_directive:
                waiting.append(example)
            elif (is_block(example) and not is_invisible(example)) or example.region.evaluator is not_code:
                if example.region.evaluator is not_code and waiting:
                    stray += [f"{page.relative_to(ROOT)}:{marker.line}" for marker in waiting]
                waiting = []
        stray += [f"{page.relative_to(ROOT)}:{marker.line}" for marker in waiting]
    assert not stray, f"docs-test markers with no runnable block after them: {stray}"


def run_groups(groups, sandbox) -> list[str]:
    """Each group of a page run in ``sandbox``: ``ok``, ``fail: <the assertion's first line>``, or the name of
    another exception (SkipTest, a YAML error)."""
    outcomes = []
    for _, _, examples in groups:
        examples[0].document.namespace.setdefault(SANDBOX, sandbox)
        try:
            for example in examples:
                example.evaluate()
            outcomes.append("ok")
        except AssertionError as error:
            outcomes.append("fail: " + str(error).splitlines()[0])
        except Exception as error:  # noqa: BLE001  (SkipTest, yaml errors)
            outcomes.append(type(error).__name__)
    return outcomes


def test_the_collector_finds_the_blocks_and_a_failing_block_fails(tmp_path, tmp_path_factory) -> None:
    """The machinery itself: markers apply to the next block only, replace must match, a failure is reported."""
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n<!-- docs-test: env EMBINIT_DOCS_PROBE=1 -->\n"
        "```python\nimport os\nprobe = os.environ['EMBINIT_DOCS_PROBE']\n```\n\n"
        "```python\nimport os\nassert 'EMBINIT_DOCS_PROBE' not in os.environ\n```\n\n"
        '<!-- docs-test: replace "exit 3" "true" -->\n```bash\nexit 3\n```\n\n'
        '<!-- docs-test: replace "absent" "x" -->\n```bash\ntrue\n```\n\n'
        '```bash\nfalse\n```\n\n<!-- skip: next "an illustration" -->\n```python\nraise SystemExit\n```\n\n'
        "```yaml\na: [1, 2\n```\n\n```bash\nembinit sweep s.yaml --variant medium\n```\n",
        encoding="utf-8",
    )
    groups = block_groups(page)
    assert [line for line, _, _ in groups] == [4, 9, 15, 20, 24, 29, 33, 37]
    outcomes = run_groups(groups, tmp_path)
    assert outcomes[:3] == ["ok", "ok", "ok"]
    assert outcomes[3].startswith("fail: docs-test replace")
    assert outcomes[4].startswith("fail: bash block at line 24")
    assert outcomes[5] == "SkipTest" and outcomes[6] == "ParserError"
    assert outcomes[7].startswith("fail: the bash block at line 37 runs a study")


def test_every_sample_output_is_compared_or_dated() -> None:
    """Output shown right after a bash or python block is that block's output at the docs-test scale (an ``output``
    marker), or says it is an earlier run's, with its date, version and commit, in the text just before it."""
    unchecked = []
    for page in PAGES:
        examples = list(parse(page).examples())
        fences = [example for example in examples if is_block(example) or example.region.evaluator is not_code]
        for before, sample in zip(fences, fences[1:]):
            if before.region.evaluator not in (run_bash, run_python) or sample.region.evaluator is not not_code:
                continue
            if sample.parsed.language not in ("", "text", "console"):
                continue
            compared = any(
                is_output_marker(marker) and before.region.end <= marker.region.start < sample.region.start
                for marker in examples
            )
            between = " ".join(sample.document.text[before.region.end : sample.region.start].split())
            if not compared and not EARLIER_RUN.search(between):
                unchecked.append(f"{page.relative_to(ROOT)}:{sample.line}")
    assert not unchecked, (
        "sample outputs neither compared (<!-- docs-test: output -->) nor labelled 'output of an earlier run "
        f"(DATE, lightning_embinit VERSION at COMMIT)': {unchecked}"
    )


def test_a_sample_output_is_compared_with_what_the_block_above_printed(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```bash\nprintf 'loss 1.0\\ntime 3 s\\n'\n```\n\n"
        '<!-- docs-test: output ignore "^time" tolerance 0.01 -->\n```text\nloss   1.004\ntime 9 s\n```\n\n'
        "```python\nprint('loss', 2.5)\n```\n\n<!-- docs-test: output -->\n```\nloss 2.5\n```\n\n"
        "```python\nprint('loss', 2.5)\n```\n\n<!-- docs-test: output -->\n```text\nloss 2.6\n```\n\n"
        "```bash\nprintf 'loss 1.0\\n'\n```\n\n<!-- docs-test: output tolerance 0.01 -->\n```text\nloss 1.1\n```\n\n"
        "```bash\nprintf 'loss 1.0\\n'\n```\n\n<!-- docs-test: output -->\n```text\nloss 1.0\nmore\n```\n",
        encoding="utf-8",
    )
    groups = block_groups(page)
    assert [(line, len(examples)) for line, _, examples in groups] == [(3, 3), (13, 3), (22, 3), (31, 3), (40, 3)]
    outcomes = run_groups(groups, tmp_path)
    assert outcomes[:2] == ["ok", "ok"]
    assert all(outcome.startswith("fail: the sample output at line") for outcome in outcomes[2:]), outcomes
    with pytest.raises(ValueError, match="bad docs-test marker"):
        parse_directive("output tolerance much")
