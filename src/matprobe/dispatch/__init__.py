"""Dispatch tables: a run's winners exported for an engine, and loaded back as kernels.

``matprobe dispatch`` (or ``run --dispatch DIR``) writes one JSON table per
device and dtype (:mod:`~matprobe.dispatch.table`, :mod:`~matprobe.dispatch.export`);
an engine calls :func:`load` and asks the :class:`~matprobe.dispatch.kernels.Dispatcher`
for a spec's kernel, or its ``linear``, or the ``torch.library`` custom op.
Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from matprobe.dispatch.table import DispatchError, DispatchTable, Entry, load_table

if TYPE_CHECKING:
    from matprobe.dispatch.kernels import Dispatcher
    from matprobe.measure.device import DeviceInfo

__all__ = [
    "DispatchError",
    "DispatchTable",
    "Entry",
    "custom_op_linear",
    "load",
    "load_table",
    "table_linear",
    "unjudged_entries",
]


def load(path: str, device: DeviceInfo | None = None, **options: Any) -> Dispatcher:
    """The table at ``path``, checked against ``device`` (default: this process's GPU,
    else the CPU), as a :class:`~matprobe.dispatch.kernels.Dispatcher`."""
    from matprobe.dispatch.kernels import Dispatcher
    from matprobe.measure.device import detect

    return Dispatcher.load(path, device or detect(), **options)


def table_linear(table: DispatchTable | str, device: DeviceInfo) -> Any:
    from matprobe.dispatch.kernels import table_linear as eager

    return eager(table, device)


def custom_op_linear(table: DispatchTable | str, device: DeviceInfo) -> Any:
    from matprobe.dispatch.kernels import custom_op_linear as compiled

    return compiled(table, device)


def unjudged_entries(table: DispatchTable, store_path: Path) -> list[str]:
    """Why the table's winners have no PASS in the store (see
    :mod:`matprobe.dispatch.verdicts`): empty when every one was judged."""
    from matprobe.dispatch.verdicts import unjudged_entries as unjudged

    return unjudged(table, store_path)
