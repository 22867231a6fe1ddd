"""The history of every run, in four parts: ``store`` (the SQLite store: schema, paths,
journal modes, :class:`~suite.history.store.HistoryStore`), ``ingest`` (run directories into
it: import, rebuild, the hook at the end of ``dlsuite run``), ``analysis`` (the regression check
over the last N runs, the figures' trends) and ``report`` (the trend plots and the report's
History section). ``dlsuite history`` is suite/cli/history.py. docs/guide/history.md has the story.
"""
