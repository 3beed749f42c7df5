# Two commands do all the set-up: `make demo` and `make test` (each creates .venv if missing).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean lint

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/k3 demo

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) outputs/*/ .pytest_cache

# Opt-in real engine on CPU (llama.cpp + Gemma 3 270M) in .venv-llama/ and models/: built once (~5 min), cached.
.PHONY: realengine realengine-serve
realengine:
	bash scripts/realengine.sh build

realengine-serve: realengine
	bash scripts/realengine.sh serve
