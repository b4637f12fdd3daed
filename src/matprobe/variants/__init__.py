"""The kernel variant families matprobe ships; ``catalogue.shipped_registry()`` lists them."""
