# Everything runs in a local virtualenv; torch is installed first as the CPU wheel.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# pytest-xdist: one worker per core; a test file's tests, or a docs page's blocks, stay on one worker (tests/conftest.py)
XDIST ?= -n auto

# setuptools' editable install warns, at every install, that a folder named like the package may shadow it; the
# repository root is that folder on purpose
EDITABLE = PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet

LATEST_VENV ?= .venv-lightning-latest
DIST_VENV ?= .venv-dist

.PHONY: install lint format test test-fast test-lightning-latest quickstart bench gpu-check dist wheel-check docs clean

# The last two lines install litgpt and torchtune for the model-family tests without their dependencies: litgpt
# pins huggingface-hub<1.4 and jsonargparse<=4.41, which would downgrade what transformers and LightningCLI use;
# torchtune asks for huggingface-hub's hf_transfer extra, which huggingface-hub 1.x no longer has. Their model code
# needs neither pin; torchtune's imports need the packages of the line before. They come last: pip skips its
# dependency check with --no-deps, and would report torchtune's unmet dependencies after any later install.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(EDITABLE) -e ".[test]"
	$(PY) -m pip install --quiet torchao==0.13.0 "torchdata>=0.11,<0.12" omegaconf sentencepiece tiktoken
	$(PY) -m pip install --quiet --no-deps litgpt==0.5.13 torchtune==0.6.1
	touch $@

install: $(VENV)/.installed

$(VENV)/.installed-docs: $(VENV)/.installed pyproject.toml
	$(EDITABLE) -e ".[docs]"
	touch $@

## the documentation site, docs/_build/html/index.html: MyST pages, the API reference from the docstrings, the
## notebooks of examples/notebooks executed at EMBINIT_NOTEBOOK_SCALE=ci (cached); every warning is an error
docs: $(VENV)/.installed-docs
	EMBINIT_NOTEBOOK_SCALE=ci $(PY) -m sphinx -b html -n -W --keep-going docs docs/_build/html

## ruff: the linter and the formatter's check over the repository (configured in pyproject.toml)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

## ruff: format the repository and apply the linter's safe fixes
format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## the whole test suite (the README's test command; .ci/run runs it)
test: install
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

## the suite without tests marked slow or ddp
test-fast: install
	$(PY) -m pytest -q $(XDIST) -m "not slow and not ddp" $(PYTEST_ARGS)

## the callback, CLI and bucketed-data tests against the newest Lightning on the package index (it reads private
## Lightning details that a release may rename; .ci/run runs this after `make test`)
test-lightning-latest:
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST_VENV)/bin/python -m pip install --quiet torch==2.13.0
	echo "torch==2.13.0" > $(LATEST_VENV)/constraints.txt
	$(LATEST_VENV)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager \
		-c $(LATEST_VENV)/constraints.txt -e ".[test]" lightning
	$(LATEST_VENV)/bin/python -c "import lightning; print('callback tests against Lightning', lightning.__version__)"
	$(LATEST_VENV)/bin/python -m pytest -q $(PYTEST_ARGS) tests/test_callback.py tests/test_callback_resume.py \
		tests/test_callback_tokens.py tests/test_cli.py tests/test_initial_loss.py tests/test_models_stage_order.py \
		tests/test_data_text_ddp.py tests/test_data_classification.py tests/test_vocabulary_extension_callback.py

## the main job: a tied-embedding LM under four initializations (three starts, four heads), offline, one table
quickstart: install
	$(PY) -m lightning_embinit.commands.quickstart

## the sdist and the wheel in dist/ (`python -m build`: the wheel is built from the sdist), checked by `twine check`;
## build and twine live in their own virtualenv, not in the package's dependencies
dist:
	rm -rf dist
	test -x $(DIST_VENV)/bin/python || $(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet --upgrade pip build twine
	$(DIST_VENV)/bin/python -m build --outdir dist .
	$(DIST_VENV)/bin/python -m twine check --strict dist/*

## the package as users install it: the wheel (not editable) with every extra in a fresh virtualenv, its console
## scripts and the quick start run from outside the repository (.ci/wheel_check; .ci/run runs it)
wheel-check: dist
	bash .ci/wheel_check dist

bench: install
	$(PY) benchmarks/bench_init_callback.py
	$(PY) benchmarks/bench_tied_lm.py
	$(PY) benchmarks/bench_seq2seq.py train --size small --fused-adam
	$(PY) benchmarks/bench_classifier.py --size small
	$(PY) benchmarks/bench_monitors.py --models tied_lm

## on a machine with one NVIDIA GPU, within 8 minutes: the CUDA tests, a bf16 fit of every model family with the
## callbacks, the training benchmarks in bf16 with MFU (benchmarks/gpu_check.py); without one: a line, exit 0
gpu-check: install
	$(PY) benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(DIST_VENV) dist build lightning_logs .pytest_cache docs/_build docs/notebooks docs/api/generated
