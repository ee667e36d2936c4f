# One target per job. `make demo` and `make test` set everything up first.
# Everything runs in the project's own virtual environment (made by `make setup`), never the
# system's or the user's interpreter; PYTHON=... picks another.
PYTHON ?= .venv/bin/python
export PYTHON

.PHONY: setup setup-demo setup-bench build demo test test-rust test-python bench bench-rust lint fuzz wheels

setup:            ## everything the tests need: system packages, reference tools, .venv with the package
	.ci/setup test

setup-demo:       ## only what the demo needs: a C compiler, gdb, .venv with the package (builds the Rust core)
	.ci/setup demo

setup-bench:      ## what the tests need, and samply (the perf benchmarks' reference)
	.ci/setup bench

build:            ## rebuild the Rust core after changes
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-build-isolation -e .
	$(PYTHON) -m compileall -q python/stackwalk

demo: setup-demo  ## build a sample program, stop it under gdb, unwind it, compare with gdb
	$(PYTHON) -m stackwalk demo

test: setup test-rust test-python  ## every test: Rust unit tests, then pytest (benchmarks as smoke tests)

test-rust:  # with no cache (STACKWALK_CACHE_DIR set and empty): the tests' files stay out of the user's
	STACKWALK_CACHE_DIR= cargo test --quiet

test-python:
	$(PYTHON) -m pytest

# maturin cross-links with zig (the ziglang package) for glibc 2.17 and for aarch64, no container;
# tests/wheels.py builds, checks (auditwheel) and smoke-tests them in other CPythons' venvs.
wheels: setup-demo ## manylinux2014 wheels (x86_64, aarch64) and a musllinux one in dist/, checked
	$(PYTHON) -m pip install -q --disable-pip-version-check "maturin>=1.9,<2" "ziglang>=0.13,<0.18" "auditwheel>=6,<7"
	$(PYTHON) tests/wheels.py dist

bench: setup-bench ## run the benchmarks for real, print the ratios, write docs/speed-latest.md
	STACKWALK_BENCH_REPORT=docs/speed-latest.md $(PYTHON) -m pytest benches --benchmark-enable --benchmark-group-by=group -q

# Not part of `make test`: the comparison crate (benches/framehop_cmp, its own workspace) builds
# framehop and criterion, minutes on this machine; BENCH_ARGS go to the benchmark binary.
bench-rust: setup ## stackwalk's Rust unwind loop vs framehop, ns/frame on the same captured stacks
	$(PYTHON) benches/framehop_cmp/run.py $(BENCH_ARGS)

lint:            ## rustfmt, clippy -D warnings, ruff (lint and format), mypy --strict, stubtest
	cargo fmt --check
	cargo clippy --all-targets --features python -- -D warnings
	$(PYTHON) -m ruff check python tests benches build_backend
	$(PYTHON) -m ruff format --check python tests benches build_backend
	$(PYTHON) -m mypy --strict python
	$(PYTHON) -m mypy.stubtest stackwalk._core

# cargo-fuzz drives libFuzzer through nightly-only compiler flags (-Zsanitizer=address);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take them. Every crash, timeout or OOM is saved
# to fuzz/artifacts/TARGET/; once fixed, it goes to rust/tests/regressions/TARGET/.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= cfi unwind perf core decompress minidump lines breakpad perfmap pe pdb macho sframe jitdump
FUZZ_FLAGS = -rss_limit_mb=2048 -timeout=10 -max_len=262144 -print_final_stats=1

fuzz: setup       ## seed the corpora from real files, then run each fuzz target FUZZ_SECONDS
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
	$(PYTHON) fuzz/seed.py
	cd fuzz && for target in $(FUZZ_TARGETS); do \
	  RUSTC_BOOTSTRAP=1 cargo fuzz run $$target -- $(FUZZ_FLAGS) \
	    -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done
