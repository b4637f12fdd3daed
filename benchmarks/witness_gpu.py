"""Issue 20 on a card: plugin rows judged apart (``matprobe.run.witness``).

Writes three plugins whose families are honest kernels — cuBLAS through
``torch.matmul(out=)``, matprobe's own ``triton.gemv_decode`` (two tiles) and
tests/test_tamper.py's float64 kernel — plus its zeros kernel; ``honest`` as
they are, ``forger`` with tests/test_witness.py's row forger (its tamper check
off, FAIL rows rewritten as PASS at 1 µs, PASS rows claiming 1/50 of their time),
``shaver`` claiming 1/1.5 of their time. Runs each with ``matprobe run --device
cuda --op matmul`` (the built-in profile's four weight matmuls) and prints every
plugin row: its status, its claimed µs a call, the witnessed lower bound, their
quotient, the claimed ratio to the baseline ÷ the one the witness timed (the
baseline in a process of its own), and why a row fell. Usage: ``PYTHONPATH=src python3
benchmarks/witness_gpu.py [OUT_DIR]`` (the stores and a JSON of the rows there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from matprobe.run.store import ResultStore
from test_plugins import PLUGIN
from test_witness import FORGES_ITS_ROWS

#: Honest fast families beside the test plugin's float64 and zeros kernels.
FAST = """
        from matprobe.measure.variants import SHIPPED_FACTORY as _SHIPPED
        from matprobe.measure.variants import resolve_factory as _resolve
        _shipped = _resolve(_SHIPPED)

        @variant_family(name="{prefix}.cublas", ops=("matmul",), devices=("cuda",))
        def mine_cublas(spec, params, device):
            def run(inputs, out):
                torch.matmul(inputs.a_mk(), inputs.b_kn(), out=out)
            return run

        def _wrap(variant_id):
            def build(spec, params, device):
                return _shipped.variant(variant_id).build(spec, device)
            return build

        mine_gemv4 = variant_family(name="{prefix}.gemv_bn4", ops=("matmul",), devices=("cuda",))(
            _wrap("triton.gemv_decode/bn4_bk512_w4"))
        mine_gemv1 = variant_family(name="{prefix}.gemv_bn1", ops=("matmul",), devices=("cuda",))(
            _wrap("triton.gemv_decode/bn1_bk1024_w8"))
        FAMILIES = (mine_exact, mine_zeros, mine_cublas, mine_gemv4, mine_gemv1)
        """

SHAVES_ITS_CLOCK = FORGES_ITS_ROWS.replace("/= 50", "/= 1.5").replace(
    'if row["status"] != "pass":', "if False:"
)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    src = str(Path(__file__).resolve().parents[1] / "src")
    everything = []
    for name, cheat in (("honest", ""), ("forger", FORGES_ITS_ROWS), ("shaver", SHAVES_ITS_CLOCK)):
        where = out / name
        where.mkdir(exist_ok=True)
        body = textwrap.dedent(PLUGIN) + textwrap.dedent(FAST) + textwrap.dedent(cheat)
        Path(where, f"{name}_kernels.py").write_text(body.replace("{prefix}", "plug"))
        db = where / "r.sqlite"
        argv = ["run", "--plugin", f"{name}_kernels", "--device", "cuda", "--op", "matmul"]
        argv += ["--db", str(db), "--variants", "plug.*", "torch.matmul", "--force"]
        env = {**os.environ, "PYTHONPATH": src}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "matprobe", *argv], cwd=where, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        seconds = time.perf_counter() - start
        (where / "stderr.txt").write_text(done.stderr)
        (where / "stdout.txt").write_text(done.stdout)
        witnessed = [ln for ln in done.stderr.splitlines() if "judged apart" in ln]
        print(f"== {name}: rc {done.returncode}, {seconds:.1f} s; {' '.join(witnessed)}")
        with ResultStore(db, read_only=True) as store:
            rows = list(store.results())
            seen = {}
            for run in store.runs():
                for entry in run.environment.get("judged_apart", []):
                    seen[(entry["spec"], entry["variant"])] = entry
        for r in sorted(rows, key=lambda r: (r.spec_key, r.variant_id)):
            if not r.variant_id.startswith("plug."):
                continue
            entry = seen.get((r.spec_key, r.variant_id), {})
            claim, lower = entry.get("claimed_us"), entry.get("lower_us")
            quotient = f"{claim / lower:.3f}" if claim and lower else "-"
            ratio, base = entry.get("claimed_ratio"), entry.get("baseline_us")
            by_ratio = f"{ratio / (lower / base):.3f}" if ratio and lower and base else "-"
            shape = " ".join(r.spec_key.split(" | ")[3:5])
            figures = f"claim {claim or 0:9.2f} µs  lower {lower or 0:9.2f} µs  {quotient:>6}"
            figures += f"  ratio {ratio or 0:6.3f} {by_ratio:>6}"
            why = (r.reason or "")[:110]
            print(f"{name:7} {shape:16} {r.variant_id:26} {r.status.value:6} {figures}  {why}")
            everything.append({"plugin": name, "spec": r.spec_key, "variant": r.variant_id,
                               "status": r.status.value, "reason": r.reason, **entry})  # fmt: skip
    (out / "witness_rows.json").write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
