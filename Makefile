# The two commands of the README: `make demo` (watch sqsjkr run on an embedded local AWS endpoint)
# and `make test` (set up and run the test suite). Both create .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test docs openapi lint clean screenshots

$(BIN)/sqsjkr: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# More options for `sqsjkr local`, e.g. make demo DEMO_ARGS='--stats-port 0' when 8061 is taken.
DEMO_ARGS ?=

demo: $(BIN)/sqsjkr
	$(BIN)/sqsjkr local --demo $(DEMO_ARGS)

# The documentation site is built with --strict before the tests: a broken link or anchor fails;
# the tests that read the built pages read that build (DOCS_BUILT_SITE; not an SQSJKR_ name,
# which every job would see in its environment) rather than make their own.
# The tests start some 150 daemons and commands: compiled once here, the package is not compiled
# anew by each of them where PYTHONDONTWRITEBYTECODE is set. For the same reason each pytest
# worker would rewrite the tests' asserts anew: one collection caches them, while the docs build.
# The tests wait on daemons, leases and subprocesses much of the time, so eight workers keep two
# cores busy (their daemons are forked, tests/forked.py: 213 s against six workers' 227 s on an
# idle machine, for 7 % more CPU); pytest sorts the slow tests first (tests/conftest.py), and
# --maxschedchunk 2 deals them out among the workers rather than handing the first worker all
# of them at once. mypy runs beside the tests, in the time they leave a core waiting, and fails
# the target as they would.
test: $(BIN)/sqsjkr
	$(BIN)/ruff check sqsjkr tests benchmarks
	$(BIN)/ruff format --check sqsjkr tests benchmarks
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m compileall -q sqsjkr
	site="$$(mktemp -d)"; \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$site" & docs=$$!; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest --collect-only -q >/dev/null || exit 1; \
	wait $$docs || exit 1; \
	$(BIN)/mypy >"$$site.mypy" 2>&1 & mypy=$$!; \
	DOCS_BUILT_SITE="$$site" $(BIN)/pytest -n 8 --maxschedchunk 2; tests=$$?; \
	wait $$mypy || { cat "$$site.mypy"; exit 1; }; exit $$tests

# The documentation site (mkdocs.yml, docs/), served on http://127.0.0.1:8000/ while it is edited;
# on another address when 8000 is taken: make docs DOCS_ADDR=127.0.0.1:8001
DOCS_ADDR ?= 127.0.0.1:8000

docs: $(BIN)/sqsjkr
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a $(DOCS_ADDR)

# The HTTP API's OpenAPI document, as `sqsjkr web` serves it, for the docs' reference page; a test
# fails while the committed one differs from what the code makes.
openapi: $(BIN)/sqsjkr
	$(BIN)/python -c 'import json; from sqsjkr.api.app import document; print(json.dumps(document(), indent=2, sort_keys=True))' > docs/reference/openapi.json

# The README's pictures of the dashboard, from the demo's data, by its end-to-end tests in
# Debian's chromium (apt-get install chromium).
screenshots: $(BIN)/sqsjkr
	SQSJKR_SCREENSHOTS=docs $(BIN)/pytest -q tests/test_web_e2e.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .mypy_cache
