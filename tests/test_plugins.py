"""The user's own kernels: plugin modules that expose ``FAMILIES``, run beside the
shipped families — in worker processes too — stored, reported and cached; every
mistake in a plugin is one line and exit status 2."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import json
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

import fake_variants
from conftest import process_ends
from matprobe.cli import main
from matprobe.kernels.catalogue import shipped_registry
from matprobe.measure.variants import SHIPPED_FACTORY, registry_with_plugins
from matprobe.run.manifest import ManifestError, parse_manifest
from matprobe.run.store import ResultStore

README = Path(__file__).resolve().parents[1] / "README.md"

#: One correct family and one that cheats, in the style of tests/fake_variants.py
#: (whose float64 reference the correct one copies in).
PLUGIN = (
    '''
"""A kernel engineer's own families."""
from collections.abc import Mapping
from typing import Any

import torch

from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import variant_family

ALL_OPS = ("matmul", "matmul_bias_add", "matmul_alpha_beta")


'''
    + inspect.getsource(fake_variants.exact)
    + '''

@variant_family(name="{prefix}.exact", ops=ALL_OPS, devices=("cpu", "cuda"))
def mine_exact(spec, params: Mapping[str, Any], device):
    """Correct: float64 math, rounded once."""

    def run(inputs, out):
        out.copy_(exact(inputs))

    return run


@variant_family(name="{prefix}.zeros", ops=ALL_OPS)
def mine_zeros(spec, params, device):
    """Cheats: writes zeros."""

    def run(inputs, out):
        out.zero_()

    return run


FAMILIES = (mine_exact, mine_zeros)
'''
)

#: One spec of the built-in profile (the fused QKV projection): a quick CPU run.
ONE_SPEC = ("--device", "cpu", "--op", "matmul_bias_add")


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current directory is a kernel engineer's repo (plugins are imported from
    there); sys.path and the plugin modules imported here are put back afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if (tmp_path / f"{name}.py").exists():
            del sys.modules[name]


@pytest.fixture
def write_plugin(plugin_dir: Path) -> Callable[[str, str], str]:
    """Write module ``name`` in the current directory; returns its name."""

    def write(name: str, text: str) -> str:
        (plugin_dir / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
        return name

    return write


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_plugin_families_run_are_stored_reported_and_cached(
    write_plugin: Callable[[str, str], str],
    plugin_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = write_plugin("kernels_run", PLUGIN.replace("{prefix}", "mine"))
    db = plugin_dir / "r.sqlite"
    args = [
        "run",
        "--plugin",
        name,
        *ONE_SPEC,
        "--db",
        str(db),
        "--variants",
        "mine.*",
        "--json",
        str(plugin_dir / "report.json"),
    ]
    code, text = run(*args)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "2 to run, 0 cached" in err
    assert "mine.exact/default" in text and "mine.zeros/default" in text
    assert "FAIL" in text
    (spec,) = json.loads((plugin_dir / "report.json").read_text())["specs"]
    statuses = {r["variant_id"]: r["status"] for r in spec["results"]}
    assert statuses["mine.exact/default"] == "pass"
    assert statuses["mine.zeros/default"] == "fail"
    with ResultStore(db) as store:
        (record,) = store.runs()
        assert {r.variant_id for r in store.results()} >= {
            "mine.exact/default",
            "mine.zeros/default",
        }
    assert record.status == "done"
    code, _ = run(*args)
    assert code == 0
    assert "0 to run, 2 cached" in capsys.readouterr().err


def test_plugin_families_are_marked_as_the_users(
    write_plugin: Callable[[str, str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = write_plugin("kernels_origin", PLUGIN.replace("{prefix}", "own"))
    registry = registry_with_plugins(SHIPPED_FACTORY, [name])
    assert registry.names()[: len(shipped_registry().names())] == shipped_registry().names()
    assert registry.family("own.exact").origin == name
    assert registry.family("own.exact").is_plugin
    assert not registry.family("torch.matmul").is_plugin
    code, text = run("variants", "--plugin", name)
    assert code == 0
    assert f"own.exact [plugin {name}]: Correct: float64 math" in text
    assert "own.exact/default  (enabled" in text


def test_manifest_lists_plugins(
    write_plugin: Callable[[str, str], str], plugin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``plugins = [...]`` loads the families before the tables are read, so the
    manifest may configure them too."""
    name = write_plugin("kernels_manifest", PLUGIN.replace("{prefix}", "mani"))
    manifest = plugin_dir / "m.toml"
    manifest.write_text(f'plugins = ["{name}"]\n[families."mani.zeros"]\nenabled = false\n')
    code, text = run("variants", "--manifest", str(manifest))
    assert code == 0
    assert "mani.exact/default  (enabled" in text and "mani.zeros/default  (disabled" in text
    code, text = run(
        "run",
        "--manifest",
        str(manifest),
        *ONE_SPEC,
        "--db",
        str(plugin_dir / "r.sqlite"),
        "--variants",
        "mani.*",
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "1 to run" in err and "mani.exact/default" in text
    assert "mani.zeros" not in text


@pytest.mark.parametrize("raw", ["kernels", [1], ["ok", ""]])
def test_manifest_plugins_must_be_a_list_of_names(raw: object) -> None:
    with pytest.raises(ManifestError, match=r"m\.toml: plugins: must be a list"):
        parse_manifest({"plugins": raw}, "m.toml", shipped_registry())


BROKEN = {
    "no FAMILIES": ("VALUE = 1\n", "defines no FAMILIES"),
    "an import error": (
        "import nosuchdependency_xyz\n",
        "cannot import: ModuleNotFoundError: No module named 'nosuchdependency_xyz'",
    ),
    "a syntax error": ("def broken(:\n", "cannot import: SyntaxError"),
    "FAMILIES of the wrong kind": ("FAMILIES = (1,)\n", "FAMILIES[0] is a int"),
    "a shipped family's name": (
        PLUGIN.replace("{prefix}.exact", "torch.matmul").replace("{prefix}", "x"),
        "family 'torch.matmul' is already registered by a family matprobe ships",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_is_one_line_and_exit_2(
    case: str,
    write_plugin: Callable[[str, str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    text, needle = BROKEN[case]
    name = write_plugin("broken_" + re.sub(r"\W", "_", case), text)
    assert main(["run", "--plugin", name, "--device", "cpu"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"matprobe: error: plugin '{name}': ")
    assert needle in line


def test_a_missing_plugin_is_one_line_and_exit_2(
    plugin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--plugin", "nosuchmodule", "--device", "cpu"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("matprobe: error: plugin 'nosuchmodule': no module named")
    assert main(["variants", "--plugin", "mykernels.py"]) == 2
    assert "did you mean 'mykernels'?" in capsys.readouterr().err


def test_two_plugins_may_not_share_a_family_name(
    write_plugin: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = write_plugin("clash_one", PLUGIN.replace("{prefix}", "same"))
    second = write_plugin("clash_two", PLUGIN.replace("{prefix}", "same"))
    assert main(["variants", "--plugin", first, "--plugin", second]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        f"plugin '{second}': family 'same.exact' is already registered by plugin '{first}'" in line
    )


# ---- the README's example ---------------------------------------------------------------


def _readme_section(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n### {heading}\n") + len(heading) + 5
    after = re.search(r"^#{1,3} ", text[start:], re.M)  # the next heading
    return text[start : start + after.start()] if after else text[start:]


def test_the_readme_plugin_example_runs(
    plugin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's plugin module and command, run as written (on one spec, on the CPU,
    with a temporary store), so the example cannot rot."""
    section = _readme_section("Your own kernels (plugins)")
    (module_text,) = re.findall(r"```python\n(.*?)```", section, re.S)
    commands = [
        line.split("#")[0].split()
        for line in "".join(re.findall(r"```bash\n(.*?)```", section, re.S)).splitlines()
    ]
    (command,) = [c for c in commands if c[:2] == ["matprobe", "run"]]
    name = command[command.index("--plugin") + 1]
    (plugin_dir / f"{name}.py").write_text(module_text, encoding="utf-8")
    argv = [arg.strip("'\"") for arg in command[1:]]
    code, _ = run(
        *argv,
        *ONE_SPEC,
        "--db",
        str(plugin_dir / "r.sqlite"),
        "--json",
        str(plugin_dir / "report.json"),
    )
    err = capsys.readouterr().err
    assert code == 0, err
    families = {
        f.name
        for f in registry_with_plugins(SHIPPED_FACTORY, [name]).families()
        if f.origin == name
    }
    (spec,) = json.loads((plugin_dir / "report.json").read_text())["specs"]
    mine = [r for r in spec["results"] if r["family"] in families]
    assert mine and {r["status"] for r in mine} == {"pass"}


#: A family with every field a description carries, and a supports check of its own.
DESCRIBED = """
from matprobe.measure.variants import variant_family


def narrow_only(spec, params, device):
    if spec.n > 64 * params["bn"]:
        raise_it = params["bn"] == 3
        if raise_it:
            raise RuntimeError("bn 3 never asked")
        return f"n={spec.n} is wider than {64 * params['bn']}"
    return None


@variant_family(name="desc.gemv", ops=("matmul",), devices=("cpu",), supports=narrow_only,
                grid={"bn": (1, 2, 3), "pdl": (0, 1), "tag": ("a", None)}, dtypes=("f16",),
                peer=True, requires=("numpy",), description="described <b>here</b>",
                activation_quant="int8_block32")
def desc_gemv(spec, params, device):
    raise AssertionError("never built where the results are kept")


FAMILIES = (desc_gemv,)
"""


def test_the_process_that_keeps_results_learns_a_plugin_as_data(
    write_plugin: Callable[[str, str], str],
) -> None:
    """A child imports the plugin; the parent's copy of each family holds the same
    fields and variants, answers ``supports`` through the child, refuses to be
    built, and the plugin module was never imported here."""
    from matprobe.errors import MatprobeError
    from matprobe.measure.device import DeviceInfo
    from matprobe.run.plugin_process import described_registry
    from matprobe.spec import MatmulSpec

    name = write_plugin("kernels_described", DESCRIBED)
    described = described_registry(SHIPPED_FACTORY, [name]).family("desc.gemv")
    assert name not in sys.modules
    imported = registry_with_plugins(SHIPPED_FACTORY, [name]).family("desc.gemv")
    for field in dataclasses.fields(imported):
        if field.name not in ("build", "supports"):
            assert getattr(described, field.name) == getattr(imported, field.name), field.name
    assert [v.id for v in described.variants()] == [v.id for v in imported.variants()]
    assert [v.fingerprint for v in described.variants()] == [
        v.fingerprint for v in imported.variants()
    ]
    cpu = DeviceInfo(kind="cpu", name="test-cpu")
    for n in (64, 100, 200):
        spec = MatmulSpec.parse(
            f"op=matmul | batch=1 | m=1 | n={n} | k=32 | tA=0 | tB=1 | dtype=f16"
        )
        for variant_here, variant_there in zip(
            described.variants(), imported.variants(), strict=True
        ):
            if variant_there.param_dict["bn"] == 3 and n > 192:
                with pytest.raises(MatprobeError, match="supports check raised RuntimeError"):
                    variant_here.unsupported_reason(spec, cpu)
                continue
            assert variant_here.unsupported_reason(spec, cpu) == variant_there.unsupported_reason(
                spec, cpu
            )
    with pytest.raises(MatprobeError, match="built in its own worker"):
        described.variants()[0].build(spec, cpu)


def test_a_grid_value_that_is_not_plain_data_is_a_clear_error(
    write_plugin: Callable[[str, str], str],
) -> None:
    from matprobe.errors import MatprobeError
    from matprobe.run.plugin_process import described_registry

    name = write_plugin("kernels_odd_grid", DESCRIBED.replace('("a", None)', "(object(),)"))
    with pytest.raises(MatprobeError, match=r"grid value .* is a object; grid values are"):
        described_registry(SHIPPED_FACTORY, [name])


def test_the_plugin_process_ends_with_the_registry_it_describes(
    write_plugin: Callable[[str, str], str],
) -> None:
    """Nothing keeps the child alive but the families it answers for: a long session
    of runs leaves no idle children behind."""
    import gc

    from matprobe.run.plugin_process import PluginProcess

    process = PluginProcess([write_plugin("kernels_ending", DESCRIBED)])
    families = process.families()
    child = process._child
    del process
    assert child.poll() is None  # the families still ask it
    del families
    gc.collect()
    assert child.wait(timeout=10) == 0


#: A plugin that, on import, starts a thread that writes a tick to a file every
#: millisecond and a helper in a session of its own that does the same to another.
BUSY_AT_IMPORT = (
    """
import subprocess, sys, threading, time
from pathlib import Path

HERE = Path(__file__).parent


def _tick(name):
    with open(HERE / name, "a") as f:
        while True:
            f.write("."); f.flush(); time.sleep(0.001)


threading.Thread(target=_tick, args=("thread.ticks",), daemon=True).start()
_helper = subprocess.Popen(
    [sys.executable, "-c", "import time, pathlib\\n"
     f"f = open({str(HERE / 'helper.ticks')!r}, 'a')\\n"
     "while True:\\n    f.write('.'); f.flush(); time.sleep(0.001)"],
    start_new_session=True,
)
(HERE / "helper.pid").write_text(str(_helper.pid))
while not (HERE / "helper.ticks").exists():  # the helper ticks before the import ends
    time.sleep(0.01)
"""
    + DESCRIBED
)


def _still(path: Path, seconds: float = 0.3) -> bool:
    """Whether ``path`` did not grow for ``seconds``."""
    import time

    before = path.stat().st_size
    time.sleep(seconds)
    return path.stat().st_size == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sends SIGSTOP")
def test_what_a_plugin_starts_in_the_describing_process_waits_between_questions(
    write_plugin: Callable[[str, str], str], plugin_dir: Path
) -> None:
    """A thread and a helper a plugin starts on import ran through the whole run,
    beside every timed kernel, in the process that describes its families (on
    3f0c18f). Now they run only while that process answers a question, and the
    helper is killed with it."""
    import gc

    from matprobe.measure.device import DeviceInfo
    from matprobe.run.plugin_process import PluginProcess
    from matprobe.run.process_tree import stat_fields
    from matprobe.spec import MatmulSpec

    process = PluginProcess([write_plugin("kernels_busy_at_import", BUSY_AT_IMPORT)])
    helper = int((plugin_dir / "helper.pid").read_text())
    ticks = [plugin_dir / "thread.ticks", plugin_dir / "helper.ticks"]
    assert all(map(_still, ticks))
    assert stat_fields(process._child.pid)[0] == stat_fields(helper)[0] == "T"
    spec = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=64 | k=32 | tA=0 | tB=1 | dtype=f16")
    cpu = DeviceInfo(kind="cpu", name="test-cpu")
    assert process.supports("desc.gemv", spec, {"bn": 1}, cpu) is None
    assert all(map(_still, ticks)) and stat_fields(helper)[0] == "T"
    child = process._child
    del process
    gc.collect()
    assert child.wait(timeout=10) == 0
    assert process_ends(helper, 2), f"the helper still runs ({stat_fields(helper)[0]})"


#: A plugin that, on import, forks a helper that leaves the session and then its
#: parent (an orphan), ticking into a file every millisecond.
ORPHAN_AT_IMPORT = (
    """
import os, time
from pathlib import Path

HERE = Path(__file__).parent
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(HERE / "orphan.ticks", "a") as f:
            (HERE / "orphan.pid").write_text(str(os.getpid()))
            while True:
                f.write("."); f.flush(); time.sleep(0.001)
    os._exit(0)
os.wait()
while not (HERE / "orphan.pid").exists():  # it ticks before the import ends
    time.sleep(0.01)
"""
    + DESCRIBED
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sends SIGSTOP")
def test_a_helper_a_plugin_orphans_in_the_describing_process_waits_and_ends_with_it(
    write_plugin: Callable[[str, str], str], plugin_dir: Path
) -> None:
    """A helper that left its session and its parent went to init: it ticked through
    the whole run and outlived it (until the twenty-eighth session). The describing
    process is a child subreaper: the orphan is its child, stopped between
    questions and killed with it."""
    import gc
    import os
    import signal

    from matprobe.run.plugin_process import PluginProcess
    from matprobe.run.process_tree import parent_of, stat_fields

    process = PluginProcess([write_plugin("kernels_orphaning", ORPHAN_AT_IMPORT)])
    orphan = int((plugin_dir / "orphan.pid").read_text())
    try:
        assert parent_of(orphan) == process._child.pid
        assert _still(plugin_dir / "orphan.ticks") and stat_fields(orphan)[0] == "T"
        child = process._child
        del process
        gc.collect()
        assert child.wait(timeout=10) == 0
        assert process_ends(orphan, 5), f"the orphan still runs ({stat_fields(orphan)[0]})"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)
