"""Dispatch tables: what a run exports for an engine, and what the loader hands back.

A table holds, per shape, our winner only where it beat the baseline beyond
noise (the baseline otherwise; a peer never); it is refused on another card or
when a family's code changed since it was measured; a shape it lacks, or one its
winner cannot build, runs the baseline; the kernels it returns compute the
right answer, eagerly and inside ``torch.compile`` as a custom op.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="dispatch kernels need torch (CPU build is enough)")

from matprobe.cli import main  # noqa: E402
from matprobe.dispatch import DispatchError, DispatchTable, Entry, load_table  # noqa: E402
from matprobe.dispatch.export import table_filename, tables_from_report  # noqa: E402
from matprobe.dispatch.kernels import Dispatcher, register_custom_op, run_linear  # noqa: E402
from matprobe.kernels.catalogue import shipped_registry  # noqa: E402
from matprobe.measure.device import DeviceInfo  # noqa: E402
from matprobe.measure.inputs import MatmulInputs, make_inputs  # noqa: E402
from matprobe.measure.references import reference  # noqa: E402
from matprobe.measure.results import PairResult  # noqa: E402
from matprobe.measure.variants import Registry  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from test_report_verdicts import (  # noqa: E402
    BASE,
    GEMV,
    NUMPY,
    OURS,
    OURS2,
    profiled,
    ratio,
    report_of,
    result,
    variant_of,
)

CPU = DeviceInfo(kind="cpu", name="test-cpu", versions={"torch": "2.x", "triton": "3.x"})
AWKWARD = "op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1 | dtype=f32"
BIASED = "op=matmul_bias_add | batch=1 | m=1 | n=37 | k=24 | tA=0 | tB=0 | dtype=f32"


def fake_registry() -> Registry:
    return Registry(variant_of(name).family for name in (BASE, NUMPY, OURS, OURS2))


def table_for(entries: list[Entry], *, device: DeviceInfo = CPU, **header: Any) -> DispatchTable:
    shipped = shipped_registry()
    families = {
        e.family: shipped.family(e.family).source_fingerprint
        for e in entries
        if e.family != "torch.matmul"
    }
    defaults: dict[str, Any] = {
        "device": {"name": device.name, "kind": device.kind, "capability": None},
        "versions": dict(device.versions),
        "dtype": "f32",
        "policy": "ptest",
        "families": families,
        "entries": tuple(entries),
    }
    defaults.update(header)
    return DispatchTable(**defaults)


def gemv_entry(spec: str = AWKWARD, **params: Any) -> Entry:
    chosen = {"bn": 8, "bk": 1024, "w": 4, "pdl": 0, **params}
    tag = "_".join(f"{k}{v}" for k, v in chosen.items())
    return Entry(spec, "triton.gemv_nt", chosen, f"triton.gemv_nt/{tag}", 2.0, 4.0, 0.5)


# ---- export ---------------------------------------------------------------------------


def current(r: PairResult, registry: Registry) -> PairResult:
    """``r`` as measured with the code installed now (its variant's fingerprint)."""
    (variant,) = registry.family(r.family).variants()
    return dataclasses.replace(r, fingerprint=variant.fingerprint)


def test_the_winner_goes_in_only_when_it_beats_the_baseline_beyond_noise() -> None:
    fast = profiled(GEMV, 24)
    tie = profiled(GEMV.replace("n=896", "n=1024"), 24)
    registry = fake_registry()
    report = report_of(
        [
            (
                fast,
                [
                    result(fast, BASE, 10.0),
                    current(result(fast, OURS, 6.0, ratio=ratio(0.6, 0.58, 0.62)), registry),
                    result(fast, NUMPY, 2.0),  # a faster peer: never dispatched to
                ],
            ),
            (tie, [result(tie, BASE, 10.0), result(tie, OURS2, 9.9, ratio=ratio(0.99, 0.9, 1.05))]),
        ]
    )
    (table,) = tables_from_report(report, registry)
    winner = table.lookup(MatmulSpec.parse(fast.key()))
    assert winner is not None and winner.family == OURS
    assert (winner.us, winner.baseline_us, winner.ratio_ci) == (6.0, 10.0, (0.58, 0.62))
    same = table.lookup(MatmulSpec.parse(tie.key()))
    assert same is not None and same.family == BASE and same.us == same.baseline_us == 10.0
    assert set(table.families) == {OURS, BASE}  # each with its source fingerprint
    assert table.device["name"] == "test GPU" and table.dtype == "f16"
    assert table.policy.startswith("p")


def test_a_winner_measured_with_other_code_is_refused() -> None:
    """The table's fingerprints are the installed code's: a result from older code
    (its variant fingerprint differs) must be re-run before it is exported."""
    fast = profiled(GEMV, 24)
    stale = result(fast, OURS, 6.0, ratio=ratio(0.6, 0.58, 0.62))  # fingerprint "fp"
    report = report_of([(fast, [result(fast, BASE, 10.0), stale])])
    with pytest.raises(DispatchError, match="measured with code that has changed since"):
        tables_from_report(report, fake_registry())


def test_a_plugins_winner_goes_in_only_if_the_runs_witness_let_it_stand() -> None:
    """A plugin's row is what its own worker said (which a plugin can forge): its
    kernel is crowned only where the run's judge apart saw it stand."""
    fast = profiled(GEMV, 24)
    registry = fake_registry()
    plugin = dataclasses.replace(registry.family(OURS), origin="my_kernels")
    registry = Registry([*(f for f in registry.families() if f.name != OURS), plugin])
    mine = current(result(fast, OURS, 6.0, ratio=ratio(0.6, 0.58, 0.62)), registry)
    report = report_of([(fast, [result(fast, BASE, 10.0), mine])])
    with pytest.raises(DispatchError, match="did not judge apart"):
        tables_from_report(report, registry)
    (table,) = tables_from_report(report, registry, witnessed={(fast.key(), mine.variant_id)})
    winner = table.lookup(MatmulSpec.parse(fast.key()))
    assert winner is not None and winner.family == OURS


def test_a_shape_without_a_timed_baseline_gets_no_entry() -> None:
    spec = profiled(GEMV, 24)
    report = report_of([(spec, [result(spec, OURS, 6.0)])])
    assert tables_from_report(report, fake_registry()) == []


def test_the_file_name_is_safe_whatever_the_device_is_called() -> None:
    table = table_for([], device=DeviceInfo(kind="cuda", name="../<b>H100</b> 80GB"))
    name = table_filename(table)
    assert "/" not in name and "<" not in name and name.endswith("-f32.json")


# ---- the file -------------------------------------------------------------------------


def test_a_table_round_trips_through_its_file(tmp_path: Path) -> None:
    table = table_for([gemv_entry()])
    path = tmp_path / "t.json"
    table.write(path)
    assert load_table(path) == table


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a dispatch table"),
        ('{"format": "other/9"}', "not a dispatch table of this matprobe"),
        ("BAD_US", "not a finite number"),
        ("NEGATIVE", "negative"),
        ("NO_ENTRIES", "malformed dispatch table"),
    ],
)
def test_what_is_not_a_table_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    good = table_for([gemv_entry()]).to_dict()
    if text == "BAD_US":
        good["entries"][0]["us"] = float("nan")
        text = json.dumps(good)
    elif text == "NEGATIVE":
        good["entries"][0]["baseline_us"] = -1
        text = json.dumps(good)
    elif text == "NO_ENTRIES":
        del good["entries"]
        text = json.dumps(good)
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DispatchError, match=message) as caught:
        load_table(path)
    assert "\n" not in str(caught.value)


# ---- the loader's checks --------------------------------------------------------------


def test_a_table_from_another_card_is_refused() -> None:
    table = table_for([gemv_entry()], device=DeviceInfo(kind="cuda", name="NVIDIA H200"))
    with pytest.raises(DispatchError, match=r"measured on NVIDIA H200, this device is test-cpu"):
        Dispatcher.checked(table, CPU, shipped_registry())


def test_a_table_whose_family_changed_since_is_refused() -> None:
    table = table_for([gemv_entry()], families={"triton.gemv_nt": "0123456789abcdef"})
    with pytest.raises(DispatchError, match=r"triton.gemv_nt has changed since"):
        Dispatcher.checked(table, CPU, shipped_registry())


def test_a_table_whose_kernels_ran_with_a_file_changed_since_is_refused(tmp_path: Path) -> None:
    """What ran, not what a family says: a winner whose process loaded a module that
    has changed since (a helper its builder imported by a computed name, say) is not
    loaded; a file that is not on this machine (a table from elsewhere) is left to
    the families' fingerprints."""
    helper = tmp_path / "helper.py"
    helper.write_text("SCALE = 1.0\n")
    digest = {str(helper): "0" * 16}  # what it held when measured: not what it holds
    elsewhere = {str(tmp_path / "not_here.py"): "1" * 16}
    table = table_for([gemv_entry()], sources={**digest, **elsewhere})
    with pytest.raises(DispatchError, match=r"source files its kernels ran with have changed"):
        Dispatcher.checked(table, CPU, shipped_registry())
    fine = table_for([gemv_entry()], sources=elsewhere)
    Dispatcher.checked(fine, CPU, shipped_registry())
    again = DispatchTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.sources == table.sources


def test_a_table_naming_a_family_not_installed_is_refused() -> None:
    entry = Entry(AWKWARD, "mine.fast", {}, "mine.fast/default", 1.0, 2.0)
    table = table_for([gemv_entry()])
    table = DispatchTable(**{**table.__dict__, "entries": (entry,)})
    with pytest.raises(DispatchError, match=r"mine.fast is not installed"):
        Dispatcher.checked(table, CPU, shipped_registry())


def test_baseline_entries_need_no_fingerprint() -> None:
    """Where the baseline won, the entry names it: loading needs only the baseline family."""
    base = Entry(AWKWARD, "torch.matmul", {}, "torch.matmul/default", 4.0, 4.0, 1.0)
    dispatcher = Dispatcher.checked(table_for([base]), CPU, shipped_registry())
    assert dispatcher.choice(MatmulSpec.parse(AWKWARD)) == (
        "torch.matmul/default",
        "the baseline won this shape",
    )


def test_other_versions_only_warn() -> None:
    table = table_for([gemv_entry()], versions={"torch": "1.0", "triton": "3.x"})
    dispatcher = Dispatcher.checked(table, CPU, shipped_registry())
    assert any(w.startswith("torch 1.0 in the table, 2.x here") for w in dispatcher.warnings)


# ---- lookups and kernels --------------------------------------------------------------


def test_the_nearest_m_is_looked_up() -> None:
    entries = [gemv_entry(AWKWARD.replace("m=1", f"m={m}")) for m in (1, 16, 128)]
    table = table_for(entries)
    # Nearest in ratio; 4 is as far from 1 as from 16, and a tie takes the smaller m.
    for asked, found in ((1, 1), (3, 1), (4, 1), (5, 16), (45, 16), (46, 128), (4096, 128)):
        entry = table.lookup(MatmulSpec.parse(AWKWARD.replace("m=1", f"m={asked}")))
        assert entry is not None and entry.m == found, asked
    assert table.lookup(MatmulSpec.parse(AWKWARD.replace("n=53", "n=54"))) is None


def _check(kernel_out: Any, inputs: MatmulInputs) -> None:
    expected = reference(inputs)
    assert torch.allclose(kernel_out.to(torch.float64), expected, rtol=1e-5, atol=1e-5)


def test_the_winner_is_built_and_computes_the_spec() -> None:
    dispatcher = Dispatcher.checked(table_for([gemv_entry()]), CPU, shipped_registry())
    spec = MatmulSpec.parse(AWKWARD)
    chosen, why = dispatcher.choice(spec)
    assert chosen.startswith("triton.gemv_nt/") and "winner" in why
    inputs = make_inputs(spec, seed=3)
    out = torch.empty(1, 1, 53)
    dispatcher.kernel_for(spec)(inputs, out)
    _check(out, inputs)


def test_a_missing_shape_and_a_refusing_winner_run_the_baseline() -> None:
    dispatcher = Dispatcher.checked(table_for([gemv_entry()]), CPU, shipped_registry())
    other = MatmulSpec.parse(AWKWARD.replace("n=53", "n=60"))
    assert dispatcher.choice(other) == (
        "torch.matmul/default",
        "no entry for this shape: the baseline",
    )
    wide = MatmulSpec.parse(AWKWARD.replace("m=1", "m=4"))  # the GEMV needs m = 1
    chosen, why = dispatcher.choice(wide)
    assert chosen == "torch.matmul/default" and "refuses this spec (needs m=1" in why
    inputs = make_inputs(wide, seed=4)
    out = torch.empty(1, 4, 53)
    dispatcher.kernel_for(wide)(inputs, out)
    _check(out, inputs)


@pytest.mark.parametrize("key", [AWKWARD, BIASED])
def test_linear_takes_a_models_operands(key: str) -> None:
    spec = MatmulSpec.parse(key)
    entries = [gemv_entry()] if spec.tB else []
    dispatcher = Dispatcher.checked(table_for(entries), CPU, shipped_registry())
    inputs = make_inputs(spec, seed=5)
    x, w = inputs.a_mk()[0], inputs.b[0]
    y = dispatcher.linear(spec, x, w, inputs.bias)
    assert y.shape == (1, spec.n)
    _check(y.unsqueeze(0), inputs)


def test_the_custom_op_stays_in_a_compiled_graph() -> None:
    """``torch.ops.matprobe.linear`` runs the table's kernel eagerly and inside
    ``torch.compile`` with no graph break (fullgraph)."""
    dispatcher = Dispatcher.checked(table_for([gemv_entry()]), CPU, shipped_registry())
    linear = register_custom_op(dispatcher, name="test")
    spec = MatmulSpec.parse(AWKWARD)
    inputs = make_inputs(spec, seed=6)
    x, w = inputs.a_mk()[0], inputs.b[0]

    def step(x: Any, w: Any) -> Any:
        return torch.relu(linear(spec, x * 2.0, w, None))

    expected = torch.relu(run_linear(dispatcher.kernel_for(spec), spec, x * 2.0, w, None))
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    assert torch.equal(step(x, w), expected)
    assert torch.equal(compiled(x, w), expected)


# ---- the command ----------------------------------------------------------------------


def test_run_dispatch_and_the_dispatch_command_write_the_same_tables(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    common = ["--device", "cpu", "--db", str(db), "--op", "matmul_bias_add"]
    common += ["--variants", "torch.*", "numpy.*"]  # the built-in profile's QKV shape
    code = main(["run", *common, "--dispatch", str(tmp_path / "a")], out=io.StringIO())
    assert code == 0
    (written,) = (tmp_path / "a").iterdir()
    table = load_table(written)
    (entry,) = table.entries
    assert entry.family == "torch.matmul"  # a peer (numpy) is never dispatched to
    out = io.StringIO()
    before = db.read_bytes()
    assert main(["dispatch", "--db", str(db), "--out", str(tmp_path / "b")], out=out) == 0
    assert db.read_bytes() == before  # exporting only reads the store
    again = load_table(tmp_path / "b" / written.name)
    assert again.entries == table.entries and again.device == table.device
    assert "1 shapes, 0 to our kernels, 1 to torch.matmul" in out.getvalue()
    assert table.dtype == "f16" and "matmul_bias_add" in entry.spec


def test_the_dispatch_command_needs_a_store(tmp_path: Path, capsys: Any) -> None:
    code = main(["dispatch", "--db", str(tmp_path / "none.sqlite"), "--out", str(tmp_path)])
    assert code == 2
    assert "no result store at" in capsys.readouterr().err


# ---- a table's winners held to the store's verdicts (token --table) --------------------


def judged(entry: Entry, tmp_path: Path, **changes: Any) -> Path:
    """A store holding ``entry``'s PASS as a run of the code installed now records it."""
    from matprobe.measure.results import Status
    from matprobe.run.store import ResultStore

    grid = {name: (value,) for name, value in entry.params.items()}
    (variant,) = shipped_registry().family(entry.family).variants(grid)
    spec = profiled(entry.spec, count=10)
    stored = dataclasses.replace(
        result(spec, entry.family, 2.0),
        variant_id=variant.id,
        params=dict(entry.params),
        fingerprint=variant.fingerprint,
        policy="ptest",
        status=Status.PASS,
    )
    stored = dataclasses.replace(stored, **changes)
    db = tmp_path / "judged.sqlite"
    with ResultStore(db) as store:
        store.put(stored)
    return db


def test_a_winner_with_its_pass_in_the_store_runs(tmp_path: Path) -> None:
    from matprobe.dispatch import unjudged_entries

    entry = gemv_entry()
    assert unjudged_entries(table_for([entry]), judged(entry, tmp_path)) == []


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"status": "fail"}, "its stored verdict is FAIL"),
        ({"fingerprint": "0123456789abcdef"}, "measured from other code or another policy"),
        ({"policy": "another"}, "measured from other code or another policy"),
        ({"spec_key": AWKWARD.replace("n=53", "n=54")}, "the store holds no result of it"),
        ({"sources": {"/nonexistent/helper.py": "0" * 16}}, "a file its PASS ran with"),
    ],
)
def test_a_winner_without_a_current_pass_is_refused(
    tmp_path: Path, changes: dict[str, Any], why: str
) -> None:
    """A table is a file anyone can write: a winner never judged, judged FAIL, judged
    from other code or under another policy, or whose PASS ran with a file that has
    changed since, is not run by the token's table modes."""
    from matprobe.dispatch import unjudged_entries
    from matprobe.measure.results import Status

    if "status" in changes:
        changes = {**changes, "status": Status(changes["status"]), "reason": "norm-wise error"}
    entry = gemv_entry()
    (problem,) = unjudged_entries(table_for([entry]), judged(entry, tmp_path, **changes))
    assert entry.variant_id in problem and why in problem


def test_an_entry_whose_parameters_name_another_variant_is_refused(tmp_path: Path) -> None:
    from matprobe.dispatch import unjudged_entries

    entry = gemv_entry()
    db = judged(entry, tmp_path)
    forged = dataclasses.replace(entry, params={**entry.params, "bn": 2})  # the id says bn8
    (problem,) = unjudged_entries(table_for([forged]), db)
    assert "its parameters name another variant" in problem


def test_a_table_of_baselines_needs_no_store(tmp_path: Path) -> None:
    from matprobe.dispatch import unjudged_entries

    base = Entry(AWKWARD, "torch.matmul", {}, "torch.matmul/default", 4.0, 4.0, 1.0)
    assert unjudged_entries(table_for([base]), tmp_path / "none.sqlite") == []
    (problem,) = unjudged_entries(table_for([gemv_entry()]), tmp_path / "none.sqlite")
    assert "no result store at" in problem


def test_token_refuses_a_table_whose_winners_the_store_never_judged(
    tmp_path: Path, capsys: Any
) -> None:
    table = table_for([gemv_entry()])
    path = tmp_path / "t.json"
    table.write(path)
    empty = judged(gemv_entry(spec=BIASED.replace("n=37", "n=38")), tmp_path)
    argv = ["token", "--small", "--device", "cpu", "--modes", "eager+table", "--table", str(path)]
    assert main([*argv, "--db", str(empty)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "1 winner(s) without a verdict" in err and "the store holds no result of it" in err


def test_a_tables_plugin_that_steers_the_baseline_steers_only_its_own_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``token --table`` never imports the table's plugins: they run in a process of
    their own (``tests/test_token_apart.py``). One that sets a cuBLAS variable at
    import sets it there, not here, and the token's figures stand. (Until the
    twenty-fifth session it was imported here, and only the tamper snapshot —
    which a plugin can replace — said so.)"""
    import os
    import sys
    import textwrap

    from test_plugins import PLUGIN

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    cheat = 'import os\nos.environ["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"\n'
    plugin = textwrap.dedent(PLUGIN).replace("{prefix}", "tok") + cheat
    (tmp_path / "steering_plugin.py").write_text(plugin, encoding="utf-8")
    base = Entry(AWKWARD, "torch.matmul", {}, "torch.matmul/default", 4.0, 4.0, 1.0)
    from matprobe.measure.device import detect

    here = detect("cpu")
    table_for([base], device=here, plugins=("steering_plugin",)).write(tmp_path / "t.json")
    argv = ["token", "--small", "--device", "cpu", "--modes", "eager+table", "--table", "t.json"]
    code = main([*argv, "--rounds", "3", "--db", str(tmp_path / "none.sqlite")], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 0, err
    assert "steering_plugin" not in sys.modules and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert "eager+table: PASS" in err and "run in a process of their own" in err


# ---- the layer's tiles -------------------------------------------------------------


def test_the_layer_modes_take_each_sites_gemv_decode_tile_from_the_table() -> None:
    """Where triton.gemv_decode won a layer site, its grid point is that site's tile;
    a site won by another family, missing, or whose point cannot run keeps the
    token's own — and says why."""
    from matprobe.dispatch.layer_tiles import layer_tiles
    from matprobe.kernels.triton.decode import DecodeTile
    from matprobe.profile.models import decode_specs, get_model

    config = get_model("qwen2.5-0.5b")
    specs = {s.role: s.spec.key() for s in decode_specs(config, context=128, dtype="f16",
                                                          layer=True)}  # fmt: skip

    def won(role: str, family: str = "triton.gemv_decode", **params: Any) -> Entry:
        tag = "_".join(f"{k}{v}" for k, v in params.items())
        return Entry(specs[role], family, params, f"{family}/{tag}", 3.0, 7.0, 0.4)

    table = table_for(
        [
            won("norm+qkv", bn=4, bk=512, w=4),
            won("o_proj+res", bn=2, bk=1024, w=4),
            won("norm+swiglu", family="torch.matmul"),
            won("down+res", bn=1, bk=48, w=8),  # not a power of two: cannot run
        ],
        dtype="f16",
    )
    tiles, kept = layer_tiles(table, config, context=128, dtype="f16")
    assert tiles == {"qkv": DecodeTile(4, 512, 4), "o_proj": DecodeTile(2, 1024, 4)}
    assert kept["norm+swiglu"] == "won by torch.matmul"
    assert kept["down+res"].startswith("its tile cannot run here")
    assert kept["norm+lm_head"] == "no entry in the table"
    # the plain (unfused) specs of a table are not the layer's sites
    plain = {s.role: s.spec.key() for s in decode_specs(config, context=128, dtype="f16")}
    other = table_for([Entry(plain["o_proj"], "triton.gemv_decode", {"bn": 2, "bk": 1024, "w": 4},
                             "triton.gemv_decode/bn2_bk1024_w4", 3.0, 7.0)])  # fmt: skip
    assert layer_tiles(other, config, context=128, dtype="f16")[0] == {}
