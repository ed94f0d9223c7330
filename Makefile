# One command each: `make test`, `make run`. Both set everything up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup debian sglang-side harness harbor docker chromium suite-clock test test-fast check run harness-recipe check-dashboard gpu-check clean

setup: $(STAMP) harness

# Set-up output (apt, pip) goes to $(SETUP_LOG); a failed step shows its tail and stops.
SETUP_LOG := $(VENV)/setup.log
logged = { $(1); } >> $(SETUP_LOG) 2>&1 || { tail -n 40 $(SETUP_LOG); echo "set-up failed: $(SETUP_LOG)"; exit 1; }

# Each set-up step times itself into $(SETUP_TIMES) (`step seconds` per line); `make test` hands
# the file and the moment make started to the suite's summary (tests/suite_clock.py), which
# prints them with the slowest tests and writes the per-test table to $(TEST_REPORT)/tests.json.
TEST_REPORT := runs/test-report
SETUP_TIMES := $(TEST_REPORT)/setup-steps.txt
SUITE_START := $(shell date +%s.%N)
# step_begin makes the set-up log's folder too: `make test` runs the steps in parallel, and one that
# writes its log (Harbor's, on a machine without its cache) may start before the venv exists.
step_begin = mkdir -p $(TEST_REPORT) $(dir $(SETUP_LOG)) && date +%s.%N > $(TEST_REPORT)/$(1).start
step_end = echo "$(1) $$(awk -v s=$$(cat $(TEST_REPORT)/$(1).start) -v e=$$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')" \
	>> $(SETUP_TIMES) && rm -f $(TEST_REPORT)/$(1).start

# The Debian packages a run or the suite needs, each installed where its command is missing, all in
# one apt-get call (every `apt-get update` costs seconds). Best effort: each step below checks its
# own command again and says what it means when it is still missing.
DEBIAN_RUN := bubblewrap:bwrap
DEBIAN_TEST := $(DEBIAN_RUN) docker.io:dockerd debootstrap:debootstrap chromium:chromium
DEBIAN ?= $(DEBIAN_RUN)
missing_debian = $(strip $(foreach p,$(DEBIAN),$(if $(shell command -v $(lastword $(subst :, ,$(p))) 2>/dev/null),,$(firstword $(subst :, ,$(p))))))

debian:
	@$(call step_begin,debian)
	@if [ -n "$(missing_debian)" ]; then echo "installing Debian packages: $(missing_debian)"; \
		mkdir -p $(VENV) && { apt-get update -qq && apt-get install -y -qq $(missing_debian); } >> $(SETUP_LOG) 2>&1 \
		|| echo "warning: apt-get install $(missing_debian) failed ($(SETUP_LOG))"; fi
	@$(call step_end,debian)

$(STAMP): pyproject.toml | debian
	@echo "setting up $(VENV) (bubblewrap, torch for CPU, swerve and its test tools); output in $(SETUP_LOG)"
	@command -v bwrap >/dev/null || echo "warning: bubblewrap not installed; sandboxes fall back to no isolation"
	@$(call step_begin,venv)
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(call step_end,venv)
	@# torch first, pinned: otherwise a dependency pulls a multi-GB CUDA build
	@# pip byte-compiles what it installs one file at a time (most of these steps' time); here it
	@# installs only, and compileall then compiles the venv on every core (the set-up: ~170 s -> ~130 s).
	@$(call step_begin,torch)
	@$(call logged,$(PY) -m pip install -q --no-compile torch==2.13.0)
	@$(call step_end,torch)
	@# The rest through uv: the same releases as pip resolves (compared package by package), in
	@# ~10 s against pip's 70-85 s. torch stays pip's (uv does not look at the CPU wheel on disk);
	@# installed first, it satisfies swerve's pin, so uv keeps it.
	@$(call step_begin,swerve)
	@$(call logged,$(PY) -m pip install -q --no-compile uv==0.13.10)
	@$(call logged,$(VENV)/bin/uv pip install -q --python $(PY) -e '.[dev]')
	@$(call step_end,swerve)
	@$(call step_begin,compile)
	@# Skipped: one file of torch's own tests written in Python 3.12 syntax (pip skipped it too).
	@$(call logged,$(PY) -m compileall -q -j 0 -x 'torch/testing/_internal/py312_intrinsics\.py' \
		"$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')")
	@$(call step_end,compile)
	@touch $(STAMP)

# SGLang's own code beside the venv (not in it: its dependencies are GPU-only), pinned, with --no-deps:
# tests/policies/engines/test_sglang_conformance.py checks our launch flags and request bodies
# against it (policies/engines/sglang_side.py finds it). The stamp holds the package list, so a
# second run is instant and a changed pin reinstalls. A failed download only warns: those tests
# then skip, naming this target.
SGLANG_VERSION := 0.5.23
SGLANG_SIDE ?= $(HOME)/.cache/swerve/sglang-$(SGLANG_VERSION)
SGLANG_SIDE_PKGS := sglang==$(SGLANG_VERSION) orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 starlette==1.10.0 \
	msgspec==0.23.0 pyzmq==27.3.0 ipython==9.18.1 traitlets==5.16.1

sglang-side: $(STAMP)
	@$(call step_begin,sglang-side)
	@if grep -qxF '$(SGLANG_SIDE_PKGS)' '$(SGLANG_SIDE)/.installed' 2>/dev/null; then :; \
	elif rm -rf '$(SGLANG_SIDE).tmp' && $(PY) -m pip install -q --no-deps --target '$(SGLANG_SIDE).tmp' $(SGLANG_SIDE_PKGS) \
		&& echo '$(SGLANG_SIDE_PKGS)' > '$(SGLANG_SIDE).tmp/.installed' \
		&& rm -rf '$(SGLANG_SIDE)' && mv '$(SGLANG_SIDE).tmp' '$(SGLANG_SIDE)'; then \
		echo "SGLang $(SGLANG_VERSION) side install: $(SGLANG_SIDE)"; \
	else rm -rf '$(SGLANG_SIDE).tmp'; \
		echo "warning: SGLang side install failed; the SGLang conformance tests will skip (retry: make sglang-side)"; fi
	@$(call step_end,sglang-side)

# mini-swe-agent for swerve/Harness-v0 (env.harness.name=mini-swe-agent), pinned, in its own venv
# outside the checkout: sandboxes bind it read-only at the same path (envs/harnesses.py finds it), and
# it is made from python3, the base interpreter of $(VENV), which the local sandbox binds too (so it
# needs nothing of $(VENV) and is set up beside it). litellm and openai
# are pinned with it because they write the requests the gateway must accept. The stamp holds the
# package list, so a second run is instant and a changed pin reinstalls. Unlike the optional parts,
# a failure stops here: the harness recipe and its tests need it.
HARNESS_PKGS := mini-swe-agent==2.4.6 litellm==1.110.2 openai==3.60.0
MINI_SWE_AGENT_DIR ?= $(HOME)/.cache/swerve/harness/mini-swe-agent-2.4.6

harness:
	@$(call step_begin,harness)
	@if grep -qxF '$(HARNESS_PKGS)' '$(MINI_SWE_AGENT_DIR)/.installed' 2>/dev/null; then :; \
	else echo "installing $(HARNESS_PKGS) into $(MINI_SWE_AGENT_DIR); output in $(SETUP_LOG)"; \
		rm -rf '$(MINI_SWE_AGENT_DIR)' && mkdir -p '$(dir $(MINI_SWE_AGENT_DIR))' \
		&& { python3 -m venv '$(MINI_SWE_AGENT_DIR)' && '$(MINI_SWE_AGENT_DIR)/bin/python' -m pip install -q $(HARNESS_PKGS); } \
			>> $(SETUP_LOG) 2>&1 \
		&& echo '$(HARNESS_PKGS)' > '$(MINI_SWE_AGENT_DIR)/.installed' \
		|| { tail -n 40 $(SETUP_LOG); rm -rf '$(MINI_SWE_AGENT_DIR)'; \
			echo "set-up failed: mini-swe-agent not installed ($(SETUP_LOG)); retry: make harness"; exit 1; }; fi
	@$(call step_end,harness)

# Harbor (PyPI harbor, pinned) in its own venv outside the checkout: tests make their Harbor task
# fixtures with Harbor's own `harbor init --task` code (tests/envs/harbor_tasks.py finds it). Harbor
# asks for Python>=3.12 and only 3.11 is here, hence --ignore-requires-python: its CLI does not start
# on 3.11, but the task initialiser runs (with a shim, in the helper). Beside it, in wheels/, the
# pure-Python wheels of what Harbor's verifier template installs with uv (pytest==8.4.1,
# pytest-json-ctrf==0.3.5, and pytest's dependencies, pinned), for verifier images built offline:
# no pytest-json-ctrf release runs on the base image's pytest 7.2.1 (all read TestReport.start, new
# in pytest 7.3). The stamp holds the package list, so a second run is instant and a changed pin
# reinstalls; a failure stops here.
HARBOR_VERSION := 0.25.0
HARBOR_PKGS := harbor==$(HARBOR_VERSION)
HARBOR_WHEELS := pytest==8.4.1 pytest-json-ctrf==0.3.5 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0 pygments==2.21.0
HARBOR_DIR ?= $(HOME)/.cache/swerve/harbor-$(HARBOR_VERSION)

harbor:
	@$(call step_begin,harbor)
	@if grep -qxF '$(HARBOR_PKGS) $(HARBOR_WHEELS)' '$(HARBOR_DIR)/.installed' 2>/dev/null; then :; \
	else echo "installing $(HARBOR_PKGS) into $(HARBOR_DIR); output in $(SETUP_LOG)"; \
		rm -rf '$(HARBOR_DIR)' && mkdir -p '$(dir $(HARBOR_DIR))' \
		&& { python3 -m venv '$(HARBOR_DIR)' \
			&& '$(HARBOR_DIR)/bin/python' -m pip install -q --ignore-requires-python $(HARBOR_PKGS) \
			&& '$(HARBOR_DIR)/bin/python' -m pip download -q --no-deps --only-binary=:all: -d '$(HARBOR_DIR)/wheels' $(HARBOR_WHEELS); } \
			>> $(SETUP_LOG) 2>&1 \
		&& echo '$(HARBOR_PKGS) $(HARBOR_WHEELS)' > '$(HARBOR_DIR)/.installed' \
		|| { tail -n 40 $(SETUP_LOG); rm -rf '$(HARBOR_DIR)'; \
			echo "set-up failed: Harbor not installed ($(SETUP_LOG)); retry: make harbor"; exit 1; }; fi
	@$(call step_end,harbor)

# A Docker engine for the container sandbox's tests: the engine (docker.io) and debootstrap (the
# offline base image) installed if missing, then the base image built once per engine (cached by
# its recipe's hash). Where none of it can be had, only a warning: those tests then skip, naming
# why. The tests start a daemon themselves when none answers, and stop it, by its pid, at the end.
docker: $(STAMP)
	@command -v dockerd >/dev/null && command -v debootstrap >/dev/null \
		|| { { apt-get update -qq && apt-get install -y -qq docker.io debootstrap; } >> $(SETUP_LOG) 2>&1; } \
		|| echo "warning: docker.io / debootstrap not installed; the Docker tests will skip"
	@$(call step_begin,docker-base-image)
	@$(PY) -m envs.sandboxes.docker_engine base-image >> $(SETUP_LOG) 2>&1 \
		|| echo "warning: no Docker base image ($$(tail -n 1 $(SETUP_LOG))); the Docker tests will skip"
	@$(call step_end,docker-base-image)

# Debian's Chromium for the dashboard check (bench/resilience/check_dashboard.py), installed if missing. Unlike
# the optional parts above, a failure stops here: the check is part of `make test`, never skipped there.
chromium: | debian
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
		|| $(call logged,apt-get update -qq && apt-get install -y -qq chromium)

# The full suite (what CI runs), the dashboard check among it (tests/bench/resilience/test_check_dashboard.py).
# Set-up first: the Debian packages in one call, then the venvs, the side installs and the Docker
# base image side by side (downloads, unpacking and debootstrap wait on the network and the disk
# more than on the cores). The summary names the slowest tests and each step's time.
SUITE_SETUP = @$(MAKE) --no-print-directory -j 4 --output-sync=target DEBIAN='$(DEBIAN)' setup sglang-side harbor docker chromium
SUITE_ENV = SWERVE_SGLANG_DIR='$(SGLANG_SIDE)' SWERVE_MINI_SWE_AGENT_DIR='$(MINI_SWE_AGENT_DIR)' SWERVE_HARBOR_DIR='$(HARBOR_DIR)'

# Two pytest-xdist workers: the slow tests mostly wait (on Ray's start, a child process, a deadline),
# so two at once fill the two cores (tests/conftest.py keeps the Docker tests on one worker).
TEST_WORKERS ?= 2
test: DEBIAN := $(DEBIAN_TEST)
test: suite-clock debian
	$(SUITE_SETUP)
	$(SUITE_ENV) SWERVE_SUITE_START=$(SUITE_START) SWERVE_SETUP_TIMES=$(SETUP_TIMES) SWERVE_TEST_TIMES=$(TEST_REPORT)/tests.json \
		$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup -m "not check" tests

# The second tier: the rest of the catalogues and the soak runs that do not fit make test's budget
# (docs/contracts.md lists each with its reason); each check's result lands in BENCHMARKS.md. One
# alone: make check CHECK=tests/bench/resilience/test_torture.py (any pytest node id).
CHECK ?= tests
check: DEBIAN := $(DEBIAN_TEST)
check: debian
	$(SUITE_SETUP)
	$(SUITE_ENV) SWERVE_TEST_TIMES=$(TEST_REPORT)/check.json $(PY) -m pytest -q -p no:cacheprovider -m check $(CHECK)

# A run's set-up times start afresh.
suite-clock:
	@rm -f $(SETUP_TIMES)

# Unit tests only: no Ray, no process fleets, no training runs (tests marked `slow` are left out).
test-fast: setup
	SWERVE_TEST_TIMES=$(TEST_REPORT)/test-fast.json $(PY) -m pytest -q -p no:cacheprovider -m "not slow" tests

# Overrides for the default job: make run ARGS='run.seed=1 trainer.total_steps=16'.
ARGS ?=
run: setup
	$(VENV)/bin/swerve pipeline --config configs/default.yaml $(ARGS)

# The harness recipe (README, "Training your own agent harness"): base, SFT on expert traces made
# through the unmodified harness, async GRPO, eval on the 100 held-out micro tasks. mini-swe-agent's
# tool-calling configuration by default; HARNESS_CONFIG=configs/harness_tool_agent.yaml trains the
# second harness, ARGS='env.harness.mini_swe_agent_config=text' mini-swe-agent's text-based one.
HARNESS_CONFIG ?= configs/harness_mini_swe_agent.yaml
harness-recipe: setup
	$(PY) -m actors pipeline --config $(HARNESS_CONFIG) $(ARGS)

# A real headless browser shows our roles in Ray's dashboard during a short run; the screenshot
# is left at runs/check-dashboard/dashboard-actors.png.
check-dashboard: DEBIAN := $(DEBIAN_RUN) chromium:chromium
check-dashboard: setup chromium
	timeout 600 $(PY) -m bench.resilience.check_dashboard --run-dir runs/check-dashboard

# The one prepared run for a lent GPU machine (README "Checking on a GPU machine"; bench/gpu_check.py):
# the device's own python3 (CUDA torch, transformers), the wheels it lacks carried from
# runs/gpu-check/wheels, the report in $$OUT (else runs/gpu-check). DRY=1, here: downloads those wheels
# (PyPI), then runs every part at a tiny size on CPU with only the device's packages and checks the plan
# (what travels fits 64 MiB, the time estimate fits 8 minutes).
GPU_PY ?= python3
gpu-check: $(if $(filter 1,$(DRY)),$(STAMP))
ifeq ($(DRY),1)
	$(PY) -m bench.gpu_check --dry-run --build-wheelhouse --out runs/gpu-check/dry
else
	$(GPU_PY) -m bench.gpu_check
endif

clean:
	rm -rf $(VENV) runs
