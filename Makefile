# One command each: `make test`, `make run`. Both set everything up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast run clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap) \
		|| echo "warning: bubblewrap not installed; sandboxes fall back to no isolation"
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first, pinned: otherwise a dependency pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The full suite (what CI runs).
test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

# Unit tests only: no Ray, no process fleets, no training runs (tests marked `slow` are left out).
test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" tests

run: setup
	$(VENV)/bin/swerve pipeline --config configs/default.yaml

clean:
	rm -rf $(VENV) runs
