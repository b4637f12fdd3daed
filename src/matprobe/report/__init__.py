"""The report side: what a run found, said to people and to programs.

* :mod:`~matprobe.report.model` — a report: per spec, every variant's row, ranked;
* :mod:`~matprobe.report.build` — a report built from a run, or from stored results;
* :mod:`~matprobe.report.cells` — the cells and lines the renderings share;
* :mod:`~matprobe.report.text`, :mod:`~matprobe.report.markdown`,
  :mod:`~matprobe.report.json_csv`, :mod:`~matprobe.report.html` (with
  :mod:`~matprobe.report.svg_plot`) — the renderings; :mod:`~matprobe.report.tables`
  lays out their tables;
* :mod:`~matprobe.report.stored_report` — a run's report kept in its store, and rebuilt;
* :mod:`~matprobe.report.compare`, :mod:`~matprobe.report.history` — two runs side
  by side, a store's runs over time;
* :mod:`~matprobe.report.progress` — the run's progress bar.

A report reads results, never measures them: nothing here imports the
measurement core beyond what a result, a device, a timing policy and a
variant are.
"""
