# make setup: a .venv with the package (editable) and its test extra, a Julia to run, Xvfb
#             for headless graphics (install --xvfb), and the Julia side compiled.
# make test:  setup, what only the tests need (a browser), then the whole suite.
# make test-julia: the same for every Julia-facing test file (what CI runs on newer Julias).
# make demo:  setup, then the main job.
# make quick: ruff and mypy, the unit tests and the supervisor's tests against a real Julia, for
#             the edit-test loop (under 3 minutes here, against about 30 for make test).
# make lint:  ruff (lint and format check) and mypy alone.
# make mutants: deliberate breaks that the tests guarding each promise must catch (not in test);
#               the mutants are data, one file per area in scripts/mutants/.
# make promise-map: tests/README.md, each promise with its tests and mutant, from those files.
# make frames: both sides' frame kinds (protocol/kinds.py, JKernel's frames.jl) from the one
#              declaration of the frame protocol, jutul_jkernel/protocol/frames.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Debian's julia 1.5.3 runs through a launcher that gives it its own libunwind
# (scripts/ensure-julia.sh); a julia the caller put first on PATH (CI's newer Julias) wins.
ifeq ($(filter-out /usr/bin/julia,$(shell command -v julia 2>/dev/null)),)
export PATH := $(CURDIR)/$(VENV)/julia-bin:$(PATH)
endif

.PHONY: setup setup-test lint test test-julia quick demo bench mutants promise-map frames clean
setup: $(STAMP)
	@bash scripts/ensure-julia.sh $(VENV)
	@bash scripts/ensure-xvfb.sh
# The JKernel package's compile cache (a no-op when it is up to date; see julia/server.jl).
	@julia --startup-file=no julia/server.jl --precompile

# Only tests/test_jupyterlab.py drives a browser: the demo does not need one.
setup-test: setup
	@bash scripts/ensure-browser.sh
	@bash scripts/ensure-ssh.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench,mcp]'
	@touch $(STAMP)

# ruff (lint and format) and mypy, configured in pyproject.toml; part of quick and test.
lint: $(STAMP)
	$(PY) -m ruff check --quiet .
	$(PY) -m ruff format --check --quiet .
	$(PY) -m mypy

test: setup-test lint
	$(PY) -m pytest $(PYTEST_ARGS)

# What a second Julia runs in CI (.ci/run, for each newer Julia it finds): every test file but
# those about the Python side alone (load, fuzzing, security, the agent and MCP fronts, the
# gateway, papermill, the console, the SSH fixture), about 22 of make test's 31 minutes on 1.10.
PY_SIDE_TESTS := tests/test_load.py tests/test_fuzz.py tests/test_security.py tests/test_agent.py \
	tests/test_mcp.py tests/test_gateway.py tests/test_papermill.py tests/test_console.py \
	tests/test_many_kernels.py tests/test_distributed_ssh.py tests/test_protocol.py \
	tests/test_settings.py tests/test_promise_map.py tests/test_surface.py tests/test_frames.py
test-julia: setup-test
	$(PY) -m pytest $(filter-out $(PY_SIDE_TESTS),$(sort $(wildcard tests/test_*.py))) $(PYTEST_ARGS)

# Unit tests are those marked neither integration nor e2e; test_supervisor_julia.py is the
# supervisor against a real Julia, without Jupyter.
# One pytest at a time: two (pytest-xdist) took 126 s, but the other worker's Julia starts
# delayed the interrupt listener past the 20 ms after which a SIGINT follows its request, and
# test_interrupt_keeps_state[sleep] saw "sigint" where it asserts "frame" (1 run in 4).
quick: setup lint
	$(PY) -m pytest -q -m "not integration and not e2e" $(PYTEST_ARGS)
	$(PY) -m pytest -q -m "not slow" tests/test_supervisor_julia.py $(PYTEST_ARGS)

demo: setup
	$(PY) examples/supervisor_demo.py
# The doctor: every path a notebook takes, checked on this Julia, one line each.
	$(PY) -m jutul_jkernel.doctor
	$(PY) -m jutul_jkernel.install --sys-prefix --julia julia
# JUPYTER_PATH first, or a julia-supervised spec in the user's own Jupyter directory would win.
	JUPYTER_PATH="$(CURDIR)/$(VENV)/share/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH}" \
	$(PY) -m jupyter nbconvert --to notebook --execute examples/quickstart.ipynb --output-dir out \
		--ExecutePreprocessor.kernel_name=julia-supervised --ExecutePreprocessor.timeout=120
	@$(PY) scripts/notebook_summary.py out/quickstart.ipynb

mutants: setup
	$(PY) scripts/mutants.py $(MUTANTS_ARGS)

# Standard library only (Python 3.11+, for tomllib), so no setup: run it after adding or
# changing a mutant.
promise-map:
	$(PYTHON) scripts/promise_map.py --write

# The same (standard library only): run it after changing frames.toml, then add the new kind's
# handler on the side that receives it (tests/test_frames.py names what is missing).
frames:
	$(PYTHON) scripts/frames.py --write

bench: setup
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) out
