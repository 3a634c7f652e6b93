# gensets: `make test` and `make demo` create .venv and install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gensets-installed
LOCK   := requirements/lock.txt
OFFLINE := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
DEMO   := out/demo/imagenet-d

.PHONY: help venv venv-distributed lock test test-slow test-all demo build-imagenet-d build-recognition build-vqa build-genbench discover-failures lint bench clean

help:
	@echo "make test               create .venv (with the distributed extras), run the offline test suite (CPU, tiny models)\n                         but the end-to-end tests marked slow"
	@echo "make test-slow          the end-to-end tests marked slow (CI runs make test, then make test-slow)"
	@echo "make venv               create .venv: exactly the versions of $(LOCK) (base + dev), then gensets"
	@echo "make venv-distributed   the same from requirements/distributed.lock.txt (+ the distributed extras)"
	@echo "make lock               re-resolve both locks from pyproject.toml + requirements/lock.in (PyPI, hashes)"
	@echo "make demo               try gensets first: create .venv (about 7 min, 7 GB), build the ImageNet-D smoke set\n                         end to end into $(DEMO)/dataset"
	@echo "make build-imagenet-d   build ImageNet-D at paper scale (needs GPUs and the Hub)"
	@echo "make build-recognition  Borji-style recognition set (configs/recognition.yaml)"
	@echo "make build-vqa          Borji-style binary VQA set (configs/vqa.yaml)"
	@echo "make build-genbench DATASET=cifar-10 STRATEGY=ST   GenBench at paper scale, one (dataset, strategy)"
	@echo "make discover-failures MODEL=timm:... LABELS=\"tench,goldfish\"   failure modes of a classifier (Wiles et al.)"
	@echo "make lint               ruff, and lint-imports (the layers of ARCHITECTURE.md)"
	@echo "make bench              benchmarks/ (ratios against baselines measured in the same run)"

# The venv holds exactly a lock's versions (every package pinned and hashed, pip and setuptools included), then
# gensets itself, resolving nothing; `pip check` fails when pyproject.toml asks for what the lock lacks.
venv: $(STAMP)
venv-distributed: $(VENV)/.gensets-distributed-installed

$(STAMP): $(LOCK)
$(VENV)/.gensets-distributed-installed: requirements/distributed.lock.txt
# the distributed lock holds the base lock at the same versions (tests/test_lock.py): installing it also stands for
# `make venv`, so that `make demo` after `make test` does not reinstall gensets under running processes
$(STAMP) $(VENV)/.gensets-distributed-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing $(filter %lock.txt,$^) into $(VENV): about 7 minutes and 7 GB on a fresh machine (torch and its CUDA libraries)"
	$(BIN)/pip install --require-hashes -r $(filter %lock.txt,$^)
	$(BIN)/pip install --no-deps --no-build-isolation -e .
	$(BIN)/pip check || { echo "$(filter %lock.txt,$^) does not satisfy pyproject.toml: run make lock"; exit 1; }
	touch $@ $(if $(findstring distributed,$@),$(STAMP))

# `make lock` re-resolves every pin to the newest release that pyproject.toml and requirements/lock.in allow, on PyPI
# for this platform (Linux x86_64, CPython 3.11), with every file's hash, by a pinned uv in its own venv. The superset
# (dev + the distributed extras) first, then lock.txt under it: the two share every version they both hold.
# UPGRADE= keeps the current pins where they still fit (after adding a dependency); UPGRADE="-P numpy" bumps one.
UV      := uv==0.13.9
UPGRADE ?= --upgrade
COMPILE := .venv-lock/bin/uv pip compile -q --no-config --generate-hashes --python-version 3.11 \
  --python-platform x86_64-unknown-linux-gnu --index-url https://pypi.org/simple --custom-compile-command "make lock" \
  pyproject.toml requirements/lock.in
lock:
	test -x .venv-lock/bin/python || $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q $(UV)
	$(COMPILE) $(UPGRADE) --extra dev --extra distributed --extra distributed-dev -o requirements/distributed.lock.txt
	$(COMPILE) --extra dev -c requirements/distributed.lock.txt -o $(LOCK)

# two pytest-xdist processes (the machines have 2 cores; worksteal: an idle one takes half of the other's queue) and the
# 25 slowest tests listed; PYTEST_ARGS= runs in one process. `make test` leaves out the end-to-end tests marked
# `slow` (several processes, Ray clusters, the S3 server, every README command); `make test-slow` runs exactly those;
# CI (.ci/run) runs both, so every test runs there. `make test-all`: both, one after the other.
PYTEST_ARGS ?= -n 2 --dist worksteal --durations=25
test: lint
	$(OFFLINE) $(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-slow: $(VENV)/.gensets-distributed-installed
	$(OFFLINE) $(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

test-all: test test-slow

demo: $(STAMP)
	$(OFFLINE) $(BIN)/gensets build configs/imagenet_d.smoke.yaml --out $(DEMO)
	$(OFFLINE) $(BIN)/gensets finalize $(DEMO) --include-pending
	$(OFFLINE) $(BIN)/gensets verify $(DEMO)/dataset

build-imagenet-d: $(STAMP)
	@$(BIN)/gensets build configs/imagenet_d.yaml --out out/imagenet-d
	@echo "next: gensets review list out/imagenet-d ... then gensets finalize out/imagenet-d"

build-recognition: $(STAMP)
	@$(BIN)/gensets build configs/recognition.yaml --out out/recognition
	@$(BIN)/gensets finalize out/recognition
	@echo "score it: gensets leaderboard --models configs/leaderboard.recognition.yaml --dataset out/recognition --db out/leaderboard-recognition/results.duckdb --out out/leaderboard-recognition"

build-vqa: $(STAMP)
	@$(BIN)/gensets build configs/vqa.yaml --out out/vqa
	@$(BIN)/gensets finalize out/vqa

# GenBench at paper scale, one (dataset, strategy) per workspace: configs/genbench.yaml with `dataset`
# and `strategies` (and RA's `reference.source` when REFERENCE is given) overridden by `gensets build --set`,
# validated like the file (errors name the override) and frozen into the workspace's config.yaml.
# DATASET: a packaged GenBench name, hf:<repo> or folder:<path>; STRATEGY: ST DT CE RD NP RA, or several joined
# by + (NP+RD); REFERENCE: RA's retrieved images; ALLOW_DATASET_SPLIT=1 lets RA take the dataset's own images.
GB_NAME = genbench-$(subst /,-,$(subst :,-,$(DATASET)))-$(subst +,-,$(STRATEGY))
build-genbench: $(STAMP)
	@test -n "$(DATASET)" -a -n "$(STRATEGY)" || { echo "usage: make build-genbench DATASET=cifar-10 STRATEGY=ST [REFERENCE=hf:<retrieved images>]"; exit 2; }
	@$(BIN)/gensets build configs/genbench.yaml --out out/$(GB_NAME) --set 'dataset=$(DATASET)' \
	  --set 'strategies=[$(STRATEGY)]' $(if $(REFERENCE),--set 'reference.source=$(REFERENCE)') \
	  $(if $(ALLOW_DATASET_SPLIT),--set 'reference.allow_dataset_split=true')
	@$(BIN)/gensets finalize out/$(GB_NAME)
	@echo "score it: gensets report genbench out/$(GB_NAME) --test <real test images: a folder of class folders, or hf:dataset>"

# Failure-mode discovery (Wiles et al. 2022) of one classifier: configs/failure_modes.yaml with `classifier` and
# `labels` overridden by `gensets build --set` (validated like the file: a misspelt label is named, with
# suggestions) and frozen into the workspace; then the misclassified images are finalized and the report written.
# MODEL: a classifier spec over ImageNet-1k; LABELS: ImageNet class names, comma separated.
FM_NAME = failure-modes-$(subst @,-,$(subst /,-,$(subst :,-,$(MODEL))))
discover-failures: $(STAMP)
	@test -n "$(MODEL)" -a -n "$(LABELS)" || { echo "usage: make discover-failures MODEL=timm:hf-hub:timm/resnet50.a1_in1k LABELS=\"tench, goldfish\""; exit 2; }
	@$(BIN)/gensets build configs/failure_modes.yaml --out out/$(FM_NAME) --set 'classifier=$(MODEL)' \
	  --set 'labels=[$(LABELS)]'
	@$(BIN)/gensets finalize out/$(FM_NAME)
	@$(BIN)/gensets report failure-modes out/$(FM_NAME) --out out/$(FM_NAME)/report
	@echo "transfer: gensets eval out/$(FM_NAME) --model <other classifier> --db results.duckdb, then the report again with --db results.duckdb"

# the tests run with the distributed extras too (tests/test_distributed.py starts real Ray clusters)
lint: $(VENV)/.gensets-distributed-installed
	$(BIN)/ruff check gensets tests benchmarks scripts
	$(BIN)/lint-imports

bench: $(STAMP)
	$(OFFLINE) $(BIN)/python benchmarks/shard_write.py
	$(OFFLINE) $(BIN)/python benchmarks/eval_throughput.py

clean:
	rm -rf out .pytest_cache
