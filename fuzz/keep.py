"""Keep a slice of each fuzz corpus for ``cargo test`` (rust/tests/regressions.rs): the smallest
inputs of fuzz/corpus/TARGET, each one libFuzzer kept because it reached code or states no other
had, up to a byte budget per target, copied to rust/tests/fuzz_corpus/TARGET/ (replacing what
was there). Run after a campaign: python fuzz/keep.py [BUDGET_BYTES] (default 16 KiB)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    budget = int(sys.argv[1]) if len(sys.argv) > 1 else 16 << 10
    for corpus in sorted((ROOT / "fuzz" / "corpus").iterdir()):
        kept = ROOT / "rust" / "tests" / "fuzz_corpus" / corpus.name
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir(parents=True)
        total = count = 0
        for path in sorted(corpus.iterdir(), key=lambda p: (p.stat().st_size, p.name)):
            size = path.stat().st_size
            if total + size > budget:
                break
            shutil.copy(path, kept / path.name)
            total, count = total + size, count + 1
        print(f"{kept}: {count} inputs, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
