"""The run side: from chosen specs to stored results.

* :mod:`~matprobe.run.manifest` — which families, grids and baselines a run uses;
* :mod:`~matprobe.run.runner` — the plan (run, cached, unsupported) and its execution;
* :mod:`~matprobe.run.session` — one run from chosen specs to its report, over
  what :mod:`~matprobe.run.selection` takes (the baseline, patterns, the
  interpreted families thinned on the CPU);
* :mod:`~matprobe.run.task` — a pair to measure, and what of it crosses a process;
* :mod:`~matprobe.run.worker` (the parent's side), :mod:`~matprobe.run.worker_process`
  (the child's) — a long-lived worker process per card; :mod:`~matprobe.run.work` —
  the work queue the cards take pairs from;
* :mod:`~matprobe.run.pool`, :mod:`~matprobe.run.ray_pool` — every GPU of a host,
  the cards of a Ray cluster;
* :mod:`~matprobe.run.store` — the SQLite result store; :mod:`~matprobe.run.merge`
  merges stores written elsewhere.

How one pair is measured is the measurement core's (:mod:`matprobe.measure`);
what a run found is said by :mod:`matprobe.report`.
"""
