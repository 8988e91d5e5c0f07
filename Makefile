.PHONY: setup test lint testbins abi bench clean

PYTHON ?= python3

# Set everything up on a fresh Debian machine and run the bundled example.
setup:
	bash scripts/setup.sh

# The whole test suite (lint first: ruff and mypy must be clean).
test: lint
	$(PYTHON) -m pytest -n auto -q

lint:
	$(PYTHON) -m ruff check emutrace tests tools bench
	$(PYTHON) -m mypy emutrace

# Rebuild the committed test binaries (needs the Debian cross compilers).
testbins:
	$(MAKE) -C testbins

# Regenerate the per-ISA ABI tables from the Debian cross kernel headers.
abi:
	$(PYTHON) tools/gen_abi.py

bench:
	$(PYTHON) bench/bench_runner.py

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
