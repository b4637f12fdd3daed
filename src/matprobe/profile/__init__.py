"""The profile side: what a decode profile says, read and analysed.

* :mod:`~matprobe.profile.jsonl` — the streaming JSONL scan of a profiler trace, into what
  :mod:`~matprobe.profile.events` says a scan gathers;
* :mod:`~matprobe.profile.textsummary` — the profiler's text summary;
* :mod:`~matprobe.profile.analysis` — the analyzer's sections (``matprobe analyze``);
* :mod:`~matprobe.profile.profiles` — a profile's matmul specs, the built-in profile;
* :mod:`~matprobe.profile.models` — a model config's decode-step specs;
* :mod:`~matprobe.profile.per_token` — calls per decode token from a profile's structure;
* :mod:`~matprobe.profile.capture` — a live model's decode step recorded as a profile;
* :mod:`~matprobe.profile.synth` — synthetic profiles with their ground truth.

Nothing here measures, runs or reports: this package imports only the shared
core (``spec``, ``stats``, ``errors``, ``safetext``).
"""
