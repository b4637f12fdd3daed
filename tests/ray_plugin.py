"""A plugin for tests/test_ray.py that says where it was imported: a file in
MATPROBE_RAY_TEST_DIR named ``plugin-imported-in-a-ray-worker`` when the process
importing it is connected to Ray (a Ray worker, whose returns travel by Ray's
pickling, or the driver), else ``plugin-imported-elsewhere`` (the child that
describes plugins, the process that measures its pairs)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fake_variants import ALL_OPS, exact
from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, variant_family
from matprobe.spec import MatmulSpec

_ray = sys.modules.get("ray")
_where = "in-a-ray-worker" if _ray is not None and _ray.is_initialized() else "elsewhere"
(Path(os.environ["MATPROBE_RAY_TEST_DIR"]) / f"plugin-imported-{_where}").touch()


@variant_family(name="rayplugin.exact", ops=ALL_OPS, devices=("cpu",))
def plugin_exact(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))

    return run


FAMILIES = (plugin_exact,)
