.PHONY: setup test lint testbins abi bench clean fuzz

PYTHON ?= python3

# Set everything up on a fresh Debian machine and run the bundled example.
setup:
	bash scripts/setup.sh

# The whole test suite (lint first: ruff and mypy must be clean).
test: lint
	$(PYTHON) -m pytest -n auto --dist worksteal -q

lint:
	$(PYTHON) -m ruff check emutrace tests tools bench
	$(PYTHON) -m mypy emutrace

# Rebuild the committed test binaries (installs the Debian cross g++ first when missing:
# scripts/setup_testbins.sh; setup.sh installs only what the tests need).
testbins:
	bash scripts/setup_testbins.sh
	$(MAKE) -C testbins
	$(MAKE) -C testbins/uefi
	$(MAKE) -C testbins/dos
	$(MAKE) -C testbins/mcu
	$(MAKE) -C testbins/windows

# Regenerate the per-ISA ABI tables from the Debian cross kernel headers.
abi:
	$(PYTHON) tools/gen_abi.py

bench:
	$(PYTHON) bench/bench_runner.py

# The long fuzz run (README "The fuzz harness"): system-call arguments of every ISA and
# mutated programs under every backend, each case in budgets; exits 1 on any finding.
fuzz:
	$(PYTHON) tools/fuzz.py syscalls --cases 1000000 --seed 1
	$(PYTHON) tools/fuzz.py syscalls --cases 1000000 --seed 2
	for isa in i386 aarch64 arm mips mipsel riscv64 ppc ppc64le s390x; do \
		$(PYTHON) tools/fuzz.py syscalls --isa $$isa --cases 200000 --seed 4 || exit 1; done
	$(PYTHON) tools/fuzz.py elf --cases 100000 --seed 31 --jobs 2

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
