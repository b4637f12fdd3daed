"""Issue 20 on a card: the baseline beside a plugin's kernel against its own row.

Writes two plugins — tests/test_tamper.py's honest one (a float64 kernel and a
zeros kernel) and the one that puts a slower kernel into the worker's cache of
built baselines — runs each with ``matprobe run --device cuda --op matmul``
beside ``torch.matmul``, and prints for every plugin row its status, the
baseline's median beside it, the baseline's own row's median in the same run,
and the difference. Usage: ``PYTHONPATH=src python3 benchmarks/beside_gpu.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from matprobe.run.store import ResultStore
from test_plugins import PLUGIN
from test_tamper import PREFILLS_THE_BASELINE_CACHE


def main() -> None:
    src = str(Path(__file__).resolve().parents[1] / "src")
    for name, cheat in (("honest", ""), ("prefills", PREFILLS_THE_BASELINE_CACHE)):
        with tempfile.TemporaryDirectory() as where:
            body = textwrap.dedent(PLUGIN) + textwrap.dedent(cheat)
            Path(where, f"{name}_kernels.py").write_text(body.replace("{prefix}", "evil"))
            db = Path(where, "r.sqlite")
            argv = ["run", "--plugin", f"{name}_kernels", "--device", "cuda", "--op", "matmul"]
            argv += ["--db", str(db), "--variants", "evil.*", "torch.matmul"]
            env = {**os.environ, "PYTHONPATH": src}
            subprocess.run([sys.executable, "-m", "matprobe", *argv], cwd=where, env=env,
                           capture_output=True, check=False)  # fmt: skip
            with ResultStore(db, read_only=True) as store:
                rows = list(store.results())
            alone = {r.spec_key: r.clocks.device.median_us for r in rows
                     if r.variant_id.startswith("torch.") and r.clocks.device}  # fmt: skip
            for r in sorted(rows, key=lambda r: (r.spec_key, r.variant_id)):
                ratio = r.clocks.vs_baseline
                beside = ratio.baseline_us if ratio else None
                if r.variant_id.startswith("torch.") or r.spec_key not in alone:
                    continue
                shape = " ".join(r.spec_key.split(" | ")[3:5])
                figures = ""
                if beside is not None:
                    base = alone[r.spec_key]
                    figures = (
                        f"beside {beside:.2f} µs, alone {base:.2f} µs, {beside / base - 1:+.1%}"
                    )
                elif "slower beside" in (r.reason or ""):
                    figures = r.reason.split("; no ratio")[0].split("tamper: ")[-1]
                print(f"{name:9} {shape:16} {r.variant_id:20} {r.status.value:6} {figures}")


if __name__ == "__main__":
    main()
