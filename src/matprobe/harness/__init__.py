"""The import paths of before the restructure (issue 22), kept for scripts written
against them — the independent decode step of ``shared/probes`` imports
``matprobe.harness.inputs.MatmulInputs`` for its table mode. New code imports
from where things live: ``matprobe.measure.inputs``, and ``from matprobe import
variant_family`` for a plugin."""
