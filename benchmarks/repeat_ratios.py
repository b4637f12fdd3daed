"""Repeatability of interleaved ratios: the same (spec, variant) pairs in two stores.

    PYTHONPATH=src python3 benchmarks/repeat_ratios.py A.sqlite B.sqlite [--ops OP,OP]

For every pair PASSed in both with an interleaved ratio to the baseline: the two
ratio medians and their difference; per spec, the best variant of A (by ratio)
and its ratio in B. Read-only: the stores are opened from copies.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from matprobe.measure.results import PairResult, Status
from matprobe.run.store import ResultStore


def load(path: str) -> dict[tuple[str, str], PairResult]:
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal", "-shm"):
            if Path(path + suffix).exists():
                shutil.copy(path + suffix, Path(tmp) / ("s.sqlite" + suffix))
        with ResultStore(Path(tmp) / "s.sqlite") as store:
            rows = store.results()
    return {
        (r.spec_key, r.variant_id): r
        for r in rows
        if r.status is Status.PASS and r.clocks.vs_baseline is not None
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--ops", default="matmul,matmul_bias_add")
    args = parser.parse_args()
    ops = {f"op={op} |" for op in args.ops.split(",")}
    a, b = load(args.a), load(args.b)
    both = sorted(k for k in a.keys() & b.keys() if any(k[0].startswith(o) for o in ops))
    diffs = []
    best: dict[str, tuple[float, str]] = {}
    for key in both:
        ra, rb = a[key].clocks.vs_baseline, b[key].clocks.vs_baseline
        assert ra is not None and rb is not None
        diffs.append(rb.median / ra.median - 1)
        best[key[0]] = min(best.get(key[0], (9e9, "")), (ra.median, key[1]))
    middle = sorted(diffs)[len(diffs) // 2]
    print(
        f"{len(both)} pairs in both; ratio B/A − 1: median {middle:+.2%}, "
        f"max |.| {max(abs(d) for d in diffs):.2%}"
    )
    print(
        f"{'spec':62s} {'best variant (A)':40s} {'A ratio [CI]':>20s} "
        f"{'B ratio [CI]':>20s} {'Δ':>7s}"
    )
    for spec, (_, variant) in best.items():
        ra, rb = a[spec, variant].clocks.vs_baseline, b[spec, variant].clocks.vs_baseline
        assert ra is not None and rb is not None
        print(
            f"{spec[:62]:62s} {variant[:40]:40s} "
            f"{ra.median:.3f} [{ra.lo:.3f}–{ra.hi:.3f}] "
            f"{rb.median:.3f} [{rb.lo:.3f}–{rb.hi:.3f}] "
            f"{rb.median / ra.median - 1:+.2%}"
        )


if __name__ == "__main__":
    main()
