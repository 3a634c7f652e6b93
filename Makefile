# gensets: `make test` and `make demo` create .venv and install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gensets-installed
OFFLINE := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
DEMO   := out/demo/imagenet-d

.PHONY: help venv test demo build-imagenet-d build-recognition build-vqa build-genbench discover-failures lint bench clean

help:
	@echo "make test               create .venv, run the offline test suite (CPU, tiny models)"
	@echo "make demo               build the ImageNet-D smoke set end to end into $(DEMO)/dataset"
	@echo "make build-imagenet-d   build ImageNet-D at paper scale (needs GPUs and the Hub)"
	@echo "make build-recognition  Borji-style recognition set (configs/recognition.yaml)"
	@echo "make build-vqa          Borji-style binary VQA set (configs/vqa.yaml)"
	@echo "make build-genbench DATASET=cifar-10 STRATEGY=ST   GenBench at paper scale, one (dataset, strategy)"
	@echo "make discover-failures MODEL=timm:... LABELS=\"tench,goldfish\"   failure modes of a classifier (Wiles et al.)"
	@echo "make lint               ruff"
	@echo "make bench              benchmarks/ (ratios against baselines measured in the same run)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(OFFLINE) $(BIN)/python -m pytest -q

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
	@echo "score it: python scripts/leaderboard.py configs/leaderboard.recognition.yaml --out out/leaderboard-recognition"

build-vqa: $(STAMP)
	@$(BIN)/gensets build configs/vqa.yaml --out out/vqa
	@$(BIN)/gensets finalize out/vqa

# GenBench at paper scale, one (dataset, strategy) per workspace: configs/genbench.yaml with `dataset`
# and `strategies` (and RA's `reference.source` when REFERENCE is given) overridden by `gensets build --set`,
# validated like the file (errors name the override) and frozen into the workspace's config.yaml.
# DATASET: a packaged GenBench name, hf:<repo> or folder:<path>; STRATEGY: ST DT CE RD NP RA.
GB_NAME = genbench-$(subst /,-,$(subst :,-,$(DATASET)))-$(STRATEGY)
build-genbench: $(STAMP)
	@test -n "$(DATASET)" -a -n "$(STRATEGY)" || { echo "usage: make build-genbench DATASET=cifar-10 STRATEGY=ST [REFERENCE=hf:<dataset>]"; exit 2; }
	@$(BIN)/gensets build configs/genbench.yaml --out out/$(GB_NAME) --set 'dataset=$(DATASET)' \
	  --set 'strategies=[$(STRATEGY)]' $(if $(REFERENCE),--set 'reference.source=$(REFERENCE)')
	@$(BIN)/gensets finalize out/$(GB_NAME)
	@echo "score it: gensets report genbench out/$(GB_NAME) --test <real test images: a folder of class folders, or hf:dataset>"

lint: $(STAMP)
	$(BIN)/ruff check gensets tests benchmarks scripts

bench: $(STAMP)
	$(OFFLINE) $(BIN)/python benchmarks/shard_write.py

clean:
	rm -rf out .pytest_cache
