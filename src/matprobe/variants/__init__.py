"""The kernel variant families matprobe ships (see ``harness.variants.builtin_registry``)."""
