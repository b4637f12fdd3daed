"""Errors a user can cause. The CLI prints them as one line and exits 2."""

from __future__ import annotations


class MatprobeError(Exception):
    """A problem with the user's input or options, not a bug in matprobe."""


class SpecError(MatprobeError, ValueError):
    """A shape key or spec field that does not make sense."""


class ProfileError(MatprobeError):
    """A file that cannot be read as a profile."""
