"""dlsuite: a multi-framework deep-learning benchmark suite.

Importing this package loads no deep-learning framework (a test asserts it): the host side
(CLI, plan, backends, report) runs on a login node with nothing but the suite installed.
"""

__version__ = "0.1.0"
SCHEMA_VERSION = "1"
