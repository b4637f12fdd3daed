"""A plugin that patches what the judge or the baseline runs: on f5ced8b a plugin
that slowed ``torch.mm`` on import was ranked 0.09–0.16× of cuBLAS, and one that
replaced the comparison PASSed while writing zeros. Each family is now measured in
a process that imported its own plugin only, and a worker whose torch, numpy or
matprobe functions were replaced takes no verdict."""

from __future__ import annotations

import builtins
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from conftest import on_a_card, python_c  # noqa: E402
from matprobe.cli import main  # noqa: E402
from matprobe.measure import validate  # noqa: E402
from matprobe.measure.results import ErrorKind, PairResult, Status  # noqa: E402
from matprobe.measure.tamper import Snapshot  # noqa: E402
from matprobe.run.store import ResultStore  # noqa: E402
from test_plugins import PLUGIN  # noqa: E402

ONE_SPEC = ("--device", "cpu", "--op", "matmul_bias_add")
#: The GPU tests' spec: one ``matmul`` on the card.
ON_THE_CARD = ("--device", "cuda", "--op", "matmul")


def armed_once(arm: str) -> str:
    """A family ``{prefix}.sly`` whose kernel runs ``arm`` on its first call (after the
    worker's checks of the import), then writes zeros."""
    body = textwrap.indent(arm, " " * 20)
    return f"""
        _armed = []
        @variant_family(name="{{prefix}}.sly", ops=ALL_OPS)
        def mine_sly(spec, params, device):
            def run(inputs, out):
                if not _armed:
{body}
                    _armed.append(1)
                out.zero_()
            return run
        FAMILIES = (mine_exact, mine_zeros, mine_sly)
        """


#: A torch function mode that makes every float64 difference zero: entered, the
#: judge sees no error at all (a zeros kernel PASSed and ranked fastest).
BLIND_MODE = """
        import torch as _torch
        from torch.overrides import TorchFunctionMode as _Mode
        class _Blind(_Mode):  # every float64 difference the judge takes is zero
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if getattr(func, "__name__", "") in ("sub", "__sub__") and getattr(
                    out, "dtype", None
                ) == _torch.float64:
                    return _torch.zeros_like(out)
                return out
        """

#: What each cheater does, at import or from inside its kernel.
CHEATS = {
    "slows the baseline at import": """
        import time
        _matmul, _addmm = torch.matmul, torch.addmm
        def slow_matmul(*args, **kwargs):
            time.sleep(0.002)
            return _matmul(*args, **kwargs)
        def slow_addmm(*args, **kwargs):
            time.sleep(0.002)
            return _addmm(*args, **kwargs)
        torch.matmul, torch.addmm = slow_matmul, slow_addmm
        """,
    "replaces the judge at import": """
        from matprobe.measure import validate
        validate.describe_first = lambda *args: None
        """,
    "swaps a judging function's body at import": """
        from matprobe.measure import validate
        def _lenient(*args, **kwargs):
            return None
        validate.describe_first.__code__ = _lenient.__code__
        """,
    "adds a method to the judge's classes at import": """
        import torch as _torch
        from matprobe.measure import validate
        def _lenient_comparison(self, name):
            if name == "failure":
                return lambda *args, **kwargs: None
            return object.__getattribute__(self, name)
        def _nothing_bad(self, name):
            value = object.__getattribute__(self, name)
            return _torch.zeros_like(value) if name == "bad" else value
        validate.Comparison.__getattribute__ = _lenient_comparison
        validate.Verdicts.__getattribute__ = _nothing_bad
        """,
    "enters a torch function mode at import": BLIND_MODE
    + """
        _Blind().__enter__()
        """,
    "enters a torch dispatch mode at import": """
        import torch as _torch
        from torch.utils._python_dispatch import TorchDispatchMode as _Mode
        class _Blind(_Mode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if "sub" in str(func) and getattr(out, "dtype", None) == _torch.float64:
                    return _torch.zeros_like(out)
                return out
        _Blind().__enter__()
        """,
    "replaces a builtin at import": """
        import builtins
        _max = builtins.max
        builtins.max = lambda *args, **kwargs: _max(*args, **kwargs)
        """,
    "sets a profile function at import": """
        import sys as _sys
        _sys.setprofile(lambda frame, event, arg: None)
        """,
    "enters a torch function mode from its kernel": BLIND_MODE + armed_once("_Blind().__enter__()"),
    "replaces the judge from its kernel": armed_once(
        "from matprobe.measure import validate\nvalidate.describe_first = lambda *args: None"
    ),
}


#: What steers the baseline, the clocks or the judge's data without rebinding a
#: watched name: each PASSed on 070b365 (the snapshot watched neither settings,
#: nor the clock's classes, nor a module's constants). Run in one ``matprobe run``,
#: a plugin each, each plugin in a worker of its own.
STEERING = {
    "changes the thread count at import": """
        torch.set_num_threads(1 if torch.get_num_threads() != 1 else 2)
        """,
    "sets a cuBLAS variable at import": """
        import os
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"
        """,
    "flips a matmul backend flag at import": """
        _matmul = torch.backends.cuda.matmul
        _flag = _matmul.allow_fp16_reduced_precision_reduction
        _matmul.allow_fp16_reduced_precision_reduction = not _flag
        """,
    "replaces the CPU clock at import": """
        import time
        _now = time.perf_counter
        time.perf_counter = lambda: _now()
        """,
    "slows the device clock's graph replays at import": """
        import time
        _replay = torch.cuda.CUDAGraph.replay
        def _slow_replay(self):
            time.sleep(0.001)
            return _replay(self)
        torch.cuda.CUDAGraph.replay = _slow_replay
        """,
    "scales the device clock's events at import": """
        _elapsed = torch.cuda.Event.elapsed_time
        torch.cuda.Event.elapsed_time = lambda self, end: 0.5 * _elapsed(self, end)
        """,
    "replaces the baseline's builder at import": """
        import time
        from matprobe.kernels.peers import torch_ref
        _build = torch_ref.torch_matmul.build
        def _slow_build(spec, params, device):
            kernel = _build(spec, params, device)
            def slow(inputs, out):
                time.sleep(0.001)
                kernel(inputs, out)
            return slow
        object.__setattr__(torch_ref.torch_matmul, "build", _slow_build)
        """,
    "loosens the judge's bounds at import": """
        from matprobe.measure import validate
        validate.NORM_ACCUMULATION = validate.ELEMENT_ACCUMULATION = 1e12
        """,
    "raises the unit roundoffs in place at import": """
        from matprobe.measure import validate
        for dtype in list(validate.UNIT_ROUNDOFF):
            validate.UNIT_ROUNDOFF[dtype] = 1e6
        """,
    "turns FAIL into pass at import": """
        from matprobe.measure.results import Status
        Status.FAIL._value_ = "pass"
        """,
}


#: A kernel that finds its timed judges (``gc``) and empties what they hold, doing no
#: work on timed calls: it PASSed, the judges reporting nothing wrong.
CLEARS_ITS_JUDGES = """
        import gc
        _zeros = mine_zeros
        @variant_family(name="{prefix}.sly", ops=ALL_OPS)
        def mine_sly(spec, params, device):
            from matprobe.measure.bench import TimedJudge
            def run(inputs, out):
                judges = [o for o in gc.get_objects() if isinstance(o, TimedJudge)]
                if not judges:  # validation, the replay check: nothing to hide from
                    out.copy_(exact(inputs))
                    return
                for judge in judges:  # timed: forget what was kept, skip the work
                    for name, value in (("keep", lambda: None), ("problem", lambda: None)):
                        try:
                            setattr(judge, name, value)
                        except AttributeError:
                            pass
                    judge._held = 0
                    judge._verdicts = []
                out.zero_()
            return run
        FAMILIES = (mine_exact, mine_zeros, mine_sly)
        """


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A kernel engineer's repo as the current directory; whatever a cheater patches
    in this (the planning) process is put back afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    patched = (
        (torch, "matmul"),
        (torch, "addmm"),
        (validate, "describe_first"),
        (time, "perf_counter"),
        (torch.cuda.CUDAGraph, "replay"),
        (torch.cuda.Event, "elapsed_time"),
    )
    for owner, name in patched:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")  # recorded: put back as it was
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    settings = (
        torch.get_num_threads(),
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    )
    accumulation = validate.NORM_ACCUMULATION, validate.ELEMENT_ACCUMULATION
    roundoff = dict(validate.UNIT_ROUNDOFF)
    code = validate.describe_first.__code__
    judging_classes = {cls: set(vars(cls)) for cls in (validate.Comparison, validate.Verdicts)}
    monkeypatch.setattr(builtins, "max", builtins.max)
    before = set(sys.modules)
    yield tmp_path
    sys.setprofile(None)  # a cheater's hooks, if the plugin was imported here too
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack():
        torch.utils._python_dispatch._pop_mode()
    validate.describe_first.__code__ = code
    torch.set_num_threads(settings[0])
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = settings[1]
    Status.FAIL._value_ = "fail"
    validate.NORM_ACCUMULATION, validate.ELEMENT_ACCUMULATION = accumulation
    validate.UNIT_ROUNDOFF.update(roundoff)
    for cls, names in judging_classes.items():  # a method a cheater added
        for added in set(vars(cls)) - names:
            delattr(cls, added)
    for name in set(sys.modules) - before:
        if (tmp_path / f"{name}.py").exists():
            del sys.modules[name]


def write(folder: Path, name: str, cheat: str, prefix: str = "evil") -> str:
    body = textwrap.dedent(PLUGIN) + textwrap.dedent(cheat)
    (folder / f"{name}.py").write_text(body.replace("{prefix}", prefix), encoding="utf-8")
    return name


def run_plugins(
    folder: Path, plugins: Sequence[str], spec: Sequence[str], *variants: str
) -> dict[str, PairResult]:
    """``matprobe run`` of ``plugins`` (each with ``--plugin``) on ``spec``'s options and
    the ``variants`` globs, into a store in ``folder``: its rows by variant id."""
    db = folder / "r.sqlite"
    argv = [arg for name in plugins for arg in ("--plugin", name)]
    main(["run", *argv, *spec, "--db", str(db), "--variants", *variants])
    with ResultStore(db, read_only=True) as store:
        return {r.variant_id: r for r in store.results()}


def test_plugins_that_patch_the_judge_or_the_baseline_get_no_verdict(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each cheat of :data:`CHEATS` a plugin of its own, all in one run: a plugin's
    families run in a worker of their own, so what one patches reaches no other
    (one run, not one a cheat: the suite's time). At import: every row of the
    plugin is tampered; from a kernel: that kernel's row on."""
    plugins = [
        write(here, f"patch{i}", cheat, f"evil{i}") for i, cheat in enumerate(CHEATS.values())
    ]
    rows = run_plugins(here, plugins, ONE_SPEC, "evil*", "torch.*")
    capsys.readouterr()
    for i, cheat in enumerate(CHEATS):
        prefix = f"evil{i}.sly" if "kernel" in cheat else f"evil{i}."
        evil = [r for vid, r in rows.items() if vid.startswith(prefix)]
        assert evil and not any(r.status is Status.PASS for r in evil), cheat
        tampered = [r for r in evil if r.error_kind is ErrorKind.TAMPER]
        assert tampered, cheat
        assert all("in the process that measured it" in r.reason for r in tampered), cheat
    base = rows["torch.matmul/default"]
    assert base.status is Status.PASS and not any("patch" in path for path in base.sources)


def test_plugins_that_steer_the_baseline_the_clock_or_the_judges_data_get_no_verdict(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugins = [
        write(here, f"steer{i}", cheat, f"evil{i}") for i, cheat in enumerate(STEERING.values())
    ]
    rows = run_plugins(here, plugins, ONE_SPEC, "evil*", "torch.matmul")
    capsys.readouterr()
    for i, cheat in enumerate(STEERING):
        mine = [r for vid, r in rows.items() if vid.startswith(f"evil{i}.")]
        assert mine and not any(r.status is Status.PASS for r in mine), cheat
        assert all(r.error_kind is ErrorKind.TAMPER for r in mine), cheat
        assert all("in the process that measured it" in r.reason for r in mine), cheat
    base = rows["torch.matmul/default"]
    assert base.status is Status.PASS and not any("steer" in path for path in base.sources)


#: The cheats whose target only a card has: its clock's graphs and events, cuBLAS.
ON_A_CARD = (
    "slows the device clock's graph replays at import",
    "scales the device clock's events at import",
    "sets a cuBLAS variable at import",
    "flips a matmul backend flag at import",
)


@on_a_card
@pytest.mark.parametrize("cheat", ON_A_CARD)
def test_on_a_card_a_plugin_steering_the_clock_or_cublas_gets_no_verdict(
    here: Path, cheat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_no_verdict(here, cheat, "cuda")
    capsys.readouterr()


#: Puts a slower kernel into the worker's cache of built baselines from its builder:
#: no binding changes. On the CPU of c7320ff it ranked an exact copy of the baseline
#: 0.55× of it; on a card the baseline's own row of the run now shows it up.
PREFILLS_THE_BASELINE_CACHE = """
        import time
        from matprobe.measure import pair as _pair
        from matprobe.kernels.peers.torch_ref import torch_matmul as _cublas
        @variant_family(name="{prefix}.copy", ops=ALL_OPS, devices=("cpu", "cuda"))
        def copy_of_baseline(spec, params, device):
            baseline = _cublas.build(spec, params, device)
            def slow(inputs, out):
                torch.cuda._sleep(20_000)
                baseline(inputs, out)
            _pair._baselines[(spec.key(), "torch.matmul/default")] = slow
            return _cublas.build(spec, params, device)
        FAMILIES = (copy_of_baseline,)
        """


@on_a_card
@pytest.mark.parametrize("cheat", ["", PREFILLS_THE_BASELINE_CACHE], ids=["honest", "cheat"])
def test_on_a_card_a_plugins_ratio_rests_on_a_baseline_as_fast_as_alone(
    here: Path, cheat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = write(here, "beside_kernels", cheat)
    rows = [r for r in run_plugins(here, [name], ON_THE_CARD, "evil.*", "torch.*").values()
            if r.variant_id.startswith("evil.")]  # fmt: skip
    capsys.readouterr()
    assert rows
    for row in rows:
        if cheat:  # an exact copy of the baseline: no faster than it, on the clean figure
            ratio = row.clocks.vs_baseline
            assert row.status is Status.PASS and ratio is not None, row.reason
            # (0.894 on an H200 once: cuBLAS's two modes; the cheat was ranked 0.55×)
            assert ratio.median > 0.8 and "slower beside this kernel" in row.clocks.notes[-1]
        elif row.variant_id == "evil.exact/default":  # float64 on the card: no false alarm
            assert row.status is Status.PASS, row.reason


def assert_no_verdict(here: Path, cheat: str, device: str) -> None:
    """``matprobe run`` of the cheater's plugin beside the baseline on ``device``:
    none of its rows passes, its tampered rows say why, and the baseline's own row
    (measured in a process that never imported the plugin) passes."""
    name = write(here, "evil_kernels", {**CHEATS, **STEERING}[cheat])
    spec = ("--device", device, "--op", "matmul_bias_add")
    rows = run_plugins(here, [name], spec, "evil.*", "torch.*")
    # At import: every row of the plugin; from a kernel: that kernel's row on (a
    # family measured before it, in a process not yet patched, keeps its verdict).
    prefix = "evil.sly" if "kernel" in cheat else "evil."
    evil = {vid: r for vid, r in rows.items() if vid.startswith(prefix)}
    assert evil and not any(r.status is Status.PASS for r in evil.values()), evil
    tampered = [r for r in evil.values() if r.error_kind is ErrorKind.TAMPER]
    assert tampered and all("in the process that measured it" in r.reason for r in tampered)
    base = rows["torch.matmul/default"]
    assert base.status is Status.PASS and not any(name in path for path in base.sources)


#: Forges its rows where they are kept: in the process that receives the workers'
#: results, its FAIL rows become PASS rows. On 99b8bf2 that process imported every
#: plugin, and a kernel writing zeros was stored as passing.
FORGES_THE_STORE = """
        import dataclasses
        from matprobe.measure import results as _results
        _from_dict = _results.PairResult.from_dict.__func__
        def _forged(cls, data):
            row = _from_dict(cls, data)
            if row.variant_id.startswith("evil.") and row.status is not _results.Status.PASS:
                metrics = _results.ErrorMetrics(1e-4, 1e-4, 1e-4, 0, 5e-4, 1e-3, 3)
                row = dataclasses.replace(row, status=_results.Status.PASS, reason=None,
                                          metrics=metrics, error_kind=None)
            return row
        _results.PairResult.from_dict = classmethod(_forged)
        """

#: Writes a pickle to its worker's pipe: read with ``pickle``, it would run code
#: (here: create a file) in the process that keeps the results.
PICKLES_TO_THE_PARENT = """
        import gc
        from multiprocessing.connection import Connection
        class _Payload:
            def __reduce__(self):
                return (open, ("pwned-by-a-pickle", "w"))
        @variant_family(name="{prefix}.sly", ops=ALL_OPS)
        def mine_sly(spec, params, device):
            def run(inputs, out):
                for conn in [o for o in gc.get_objects() if isinstance(o, Connection)]:
                    try:
                        conn.send(("idle", _Payload()))
                    except Exception:
                        pass
                out.zero_()
            return run
        FAMILIES = (mine_exact, mine_zeros, mine_sly)
        """


@pytest.mark.parametrize("cheat", [FORGES_THE_STORE, PICKLES_TO_THE_PARENT])
def test_plugin_code_never_runs_in_the_process_that_keeps_the_results(
    here: Path, cheat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plugin is imported in a child that describes its families as JSON, and
    its worker speaks JSON: nothing it patches or sends runs where rows are stored."""
    name = write(here, "forging_kernels", cheat)
    from_dict = PairResult.from_dict
    rows = run_plugins(here, [name], ONE_SPEC, "evil.*")
    capsys.readouterr()
    assert not (here / "pwned-by-a-pickle").exists()
    assert name not in sys.modules and PairResult.from_dict == from_dict
    assert rows["evil.zeros/default"].status is not Status.PASS
    assert "evil.sly/default" not in rows or rows["evil.sly/default"].status is not Status.PASS


#: Writes a message of the worker's own protocol down its pipe from its kernel: a
#: result for another pair, or one that is not a result. On 070b365 either ended
#: the whole run with a traceback (the parent trusted the index and the record).
WRITES_TO_ITS_PIPE = """
        import gc, json
        from multiprocessing.connection import Connection
        @variant_family(name="{prefix}.sly", ops=ALL_OPS)
        def mine_sly(spec, params, device):
            def run(inputs, out):
                for conn in [o for o in gc.get_objects() if isinstance(o, Connection)]:
                    try:
                        conn.send_bytes(MESSAGE.encode())
                    except Exception:
                        pass
                out.copy_(exact(inputs))
            return run
        FAMILIES = (mine_exact, mine_sly)
        """


#: Out of turn, or not a result: what a kernel writes to its worker's pipe.
MESSAGES = ('["done", 999, {}]', '["done", 0, {"status": "pass"}]', '["idle"]')


def test_a_kernel_writing_to_its_workers_pipe_ends_the_worker_not_the_run(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The parent reads its workers' messages in turn: a result for the pair in
    flight, checked to be that pair's. Anything else — another pair's result, one
    that is not a result, ``idle`` mid-pair, a plugin each — ends the worker, its
    pair in flight an ERROR; the run goes on and keeps every other row. (A plugin
    that writes a whole forged result for its own pair is beyond this check: only
    a judge in a process of its own closes that; README says so.)"""
    plugins = [
        write(here, f"noisy{i}", WRITES_TO_ITS_PIPE.replace("MESSAGE", repr(message)), f"evil{i}")
        for i, message in enumerate(MESSAGES)
    ]
    rows = run_plugins(here, plugins, ONE_SPEC, "evil*")
    capsys.readouterr()
    for i, message in enumerate(MESSAGES):
        sly = rows[f"evil{i}.sly/default"]
        assert sly.status is Status.ERROR and "broke its protocol" in sly.reason, message
        assert rows[f"evil{i}.exact/default"].status is Status.PASS, message


def test_a_kernel_that_empties_its_judges_fails_on_the_count(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It cannot give a judge methods of its own (slots), and what it empties
    between calls leaves the replays kept after its last call to be judged."""
    name = write(here, "sly_kernels", CLEARS_ITS_JUDGES)
    (row,) = run_plugins(here, [name], ONE_SPEC, "evil.sly").values()
    capsys.readouterr()
    # The replay after its last call is kept whole: judged, it fails; an emptied
    # judge that somehow held none fails on the count (test_judged_calls).
    assert row.status is Status.FAIL, row.reason
    assert row.reason.startswith("timed replay ") or "timed outputs judged" in row.reason


def test_an_honest_plugin_is_judged_as_before(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = write(here, "honest_kernels", "")
    rows = run_plugins(here, [name], ONE_SPEC, "evil.*")
    capsys.readouterr()
    assert rows["evil.exact/default"].status is Status.PASS
    assert rows["evil.zeros/default"].status is Status.FAIL
    assert any(name in path for path in rows["evil.exact/default"].sources)


# ---- the snapshot ----------------------------------------------------------------------


def test_a_snapshot_sees_a_replaced_function_and_a_swapped_body() -> None:
    import types

    module = types.ModuleType("m")
    exec("def judge(x):\n    return x > 0\nCOUNTER = 0\n", module.__dict__)

    def changed(snapshot: Snapshot) -> list[str]:
        return snapshot.changed([("m", module)])

    snapshot = Snapshot.take([("m", module)])
    assert changed(snapshot) == []
    module.COUNTER = 1  # data, rebound by honest code: not watched
    assert changed(snapshot) == []
    honest_code = module.judge.__code__
    module.judge.__code__ = (lambda x: True).__code__  # the same function, another body
    assert changed(snapshot) == ["m.judge"]
    module.judge.__code__ = honest_code
    assert changed(snapshot) == []
    module.judge = lambda x: True  # another function
    assert changed(snapshot) == ["m.judge"]


def test_a_snapshot_sees_a_setting_a_family_and_an_enum_member_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What steers the baseline without rebinding a watched name: a setting, a
    family's builder or a registry entry, the value an enumeration member carries."""
    import dataclasses
    import enum
    import types

    from matprobe.kernels.catalogue import shipped_registry
    from matprobe.measure.tamper import worker_objects
    from matprobe.measure.variants import Registry

    module = types.ModuleType("matprobe.verdicts_here")
    exec("import enum\nclass Verdict(enum.Enum):\n    FAIL = 'fail'\n", module.__dict__)
    module.Verdict.__module__ = module.__name__
    registry = {"now": shipped_registry()}
    snapshot = Snapshot.take(
        [("matprobe.verdicts_here", module)], extra=lambda: worker_objects(registry["now"])
    )

    def changed() -> list[str]:
        return snapshot.changed([("matprobe.verdicts_here", module)])

    assert changed() == []
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    assert changed() == ["$CUBLAS_WORKSPACE_CONFIG set to ':0:0'"]
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert changed() == [f"torch.get_num_threads() changed from {threads} to {threads + 1}"]
    finally:
        torch.set_num_threads(threads)
    member: enum.Enum = module.Verdict.FAIL
    member._value_ = "pass"
    assert changed() == ["matprobe.verdicts_here.Verdict.<members>"]
    member._value_ = "fail"
    baseline = registry["now"].family("torch.matmul")
    slow = dataclasses.replace(baseline, build=lambda spec, params, device: None)
    families = [slow if f is baseline else f for f in registry["now"].families()]
    registry["now"] = Registry(families)  # the entry replaced by a look-alike
    assert changed() == ["family torch.matmul.build"]


def test_a_watched_class_and_a_base_of_the_same_name_are_both_watched() -> None:
    """torch.cuda.Event derives from torch.Event: named by their short names alike,
    the base's methods hid the class's, and an ``elapsed_time`` replaced at import
    PASSed on an H100."""
    from matprobe.measure.tamper import class_namespaces

    base = type("Event", (), {"elapsed_time": lambda self, end: 1.0, "__module__": "lib"})
    event = type(
        "Event", (base,), {"elapsed_time": lambda self, end: 2.0, "__module__": "lib.cuda"}
    )
    snapshot = Snapshot.take(list(class_namespaces("clock", event)))
    event.elapsed_time = lambda self, end: 0.5  # type: ignore[attr-defined]
    assert snapshot.changed(list(class_namespaces("clock", event))) == [
        "clock[lib.cuda.Event].elapsed_time"
    ]


def test_measuring_changes_nothing_the_snapshot_watches() -> None:
    """No false alarm: a pair measured by matprobe's own code leaves every watched
    binding as it was."""
    from matprobe.kernels.catalogue import shipped_registry
    from matprobe.measure.device import detect
    from matprobe.measure.pair import PairContext, measure_pair_safely
    from matprobe.measure.timing import TimingPolicy
    from matprobe.spec import MatmulSpec

    snapshot = Snapshot.take()
    spec = MatmulSpec.parse(
        "op=matmul_bias_add | batch=1 | m=1 | n=24 | k=40 | tA=0 | tB=0 | dtype=f16"
    )
    variant = shipped_registry().family("torch.matmul").variants()[0]
    policy = TimingPolicy(min_samples=3, max_samples=4, budget_s=0.01, host_samples=3)
    result = measure_pair_safely(spec, variant, PairContext(detect("cpu"), policy), variant)
    assert result.status is Status.PASS, result.reason
    assert snapshot.changed() == []


def test_python_caching_data_on_a_class_is_no_alarm() -> None:
    """``copy.copy`` stores ``__slotnames__`` on the class of what it copies — the
    timing bench copies a ``CallAnswers`` for the hot clock on a GPU, and every pair
    there was an ERROR (a name added to a watched class) until only functions and
    descriptors counted."""
    import copy

    from matprobe.measure import references

    class Judged:
        def verdict(self) -> bool:
            return True

    def changed(snapshot: Snapshot) -> list[str]:
        return snapshot.changed([("m", Judged)])

    snapshot = Snapshot.take([("m", Judged)])
    copy.copy(Judged())
    assert "__slotnames__" in vars(Judged) and changed(snapshot) == []
    Judged.__getattribute__ = lambda self, name: None  # type: ignore[method-assign,assignment]
    assert changed(snapshot) == ["m.<names>"]
    # And the class the bench copies, as it is watched in a worker.
    watched = Snapshot.take()
    copy.copy(object.__new__(references.CallAnswers))
    assert watched.changed() == []


def test_torch_rewrapping_its_own_seed_when_dynamo_loads_is_no_alarm() -> None:
    """The torch.compile peer's first build imports ``torch._dynamo``, which wraps
    ``torch.manual_seed`` in ``torch._disable_dynamo``: every torch.compile row was an
    ERROR on an H100 until the snapshot knew torch's own wrapper. A plugin's wrapper
    that claims the original as ``__wrapped__``, or torch's wrapper around the
    plugin's function, is still seen."""
    out = python_c(
        "import torch\n"
        "from matprobe.measure.tamper import Snapshot\n"
        "snapshot = Snapshot.take()\n"
        "import torch._dynamo\n"
        "print('dynamo', snapshot.changed())\n"
        "original = snapshot.originals['torch.manual_seed']\n"
        "def lenient(*args, **kwargs):\n"
        "    return original(*args, **kwargs)\n"
        "lenient.__wrapped__ = original\n"
        "torch.manual_seed = lenient\n"
        "print('claims', snapshot.changed())\n"
        "torch.manual_seed = torch._disable_dynamo(lenient)\n"
        "torch.manual_seed.__wrapped__ = original\n"
        "print('wrapped', snapshot.changed())\n"
    )
    assert out.splitlines() == [
        "dynamo []",
        "claims ['torch.manual_seed']",
        "wrapped ['torch.manual_seed']",
    ]


def test_a_torch_mode_or_a_tracer_is_tampering_and_stops_the_judge() -> None:
    """A hook changes what the judge computes without replacing anything: while one
    is active the snapshot names it and no comparison is made (run or token)."""
    from torch.overrides import TorchFunctionMode

    from matprobe.measure.hooks import HookedError
    from matprobe.token.validate import logit_error

    class Watching(TorchFunctionMode):  # changes nothing: its presence is the alarm
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    snapshot = Snapshot.take(namespaces=[])
    ref = torch.ones(4, dtype=torch.float64)
    assert snapshot.changed(namespaces=[]) == []
    assert validate.compare(ref.clone(), ref).failure(1e-3, 1e-3) is None
    with Watching():
        assert snapshot.changed(namespaces=[]) == ["a torch function mode (active)"]
        with pytest.raises(HookedError, match="torch function mode"):
            validate.compare(ref.clone(), ref)
        with pytest.raises(HookedError):
            logit_error(ref.clone(), ref)
    sys.setprofile(lambda frame, event, arg: None)
    try:
        assert snapshot.changed(namespaces=[]) == ["a profile function (sys.setprofile)"]
        with pytest.raises(HookedError, match="profile"):
            validate.compare(ref.clone(), ref)
    finally:
        sys.setprofile(None)
    assert snapshot.changed(namespaces=[]) == []


def test_torchs_own_default_device_mode_is_no_alarm() -> None:
    """``torch.set_default_device`` keeps a torch mode of torch's own active: an
    honest plugin may set it; a subclass of it is foreign."""
    from torch.utils._device import DeviceContext

    from matprobe.measure.hooks import active_hooks

    with DeviceContext("cpu"):
        assert active_hooks() == []

    class Lookalike(DeviceContext):
        pass

    with Lookalike("cpu"):
        assert active_hooks() == ["a torch function mode (active)"]
