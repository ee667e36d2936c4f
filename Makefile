# One target per job. `make demo` and `make test` set everything up first.
PYTHON ?= python3
export PYTHON

.PHONY: setup build demo test test-rust test-python bench lint

setup:            ## install system packages and the package (builds the Rust core)
	.ci/setup

build:            ## rebuild the Rust core after changes
	$(PYTHON) -m pip install -q --disable-pip-version-check -e .

demo: setup       ## build a sample program, stop it under gdb, unwind it, compare with gdb
	$(PYTHON) -m stackwalk demo

test: setup test-rust test-python  ## every test: Rust unit tests, then pytest (benchmarks as smoke tests)

test-rust:
	cargo test --quiet

test-python:
	$(PYTHON) -m pytest

bench: setup      ## run the benchmarks for real and print the ratios
	$(PYTHON) -m pytest benches --benchmark-enable --benchmark-group-by=group -q

lint:
	cargo fmt --check
	cargo clippy --all-targets --features python -- -D warnings
	$(PYTHON) -m ruff check python tests benches
	$(PYTHON) -m mypy.stubtest stackwalk._core
