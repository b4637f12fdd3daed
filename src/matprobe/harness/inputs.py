"""Old path of :mod:`matprobe.measure.inputs`: one input set of a spec."""

from matprobe.measure.inputs import MatmulInputs

__all__ = ["MatmulInputs"]
