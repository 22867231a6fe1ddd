"""The suite in ReFrame, in one place: ``config`` (``dlsuite reframe config|references``: a
ReFrame system configuration from a site profile), ``checks`` (what the test library needs from
the suite, host side, without ReFrame) and ``dlsuite_checks.py``, the ReFrame test library
itself (``reframe -C CONFIG -c suite/reframe -r``; ReFrame loads it by path and skips the
modules here that do not import ReFrame). docs/guide/integrations.md has the whole story.
"""
