"""The kernel variant families matprobe ships: ``triton/`` (its own), ``peers/``
(the libraries they are measured against, the baseline among them);
``catalogue.shipped_registry()`` lists them."""
