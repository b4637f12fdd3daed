from __future__ import annotations

from pathlib import Path

import pytest

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def seed(prefix: str) -> Path:
    """A user seed document from ../shared/seeds, or skip when it is not beside us."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        pytest.skip(f"seed {prefix}_* not found under {SEEDS} (../shared is not beside the repo)")
    return found[0]
