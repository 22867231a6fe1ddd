"""A record with a NaN (an fp16 network whose eval loss overflowed) is still written."""

from __future__ import annotations

import math

from suite.results import dumps, finite_or_null


def test_non_finite_floats_become_null_everywhere() -> None:
    rec = {"work": {"eval_loss_after": math.nan, "losses": [1.0, math.inf, -math.inf]}, "n": 3}
    clean = finite_or_null(rec)
    assert clean == {"work": {"eval_loss_after": None, "losses": [1.0, None, None]}, "n": 3}
    assert "NaN" not in dumps(clean) and "Infinity" not in dumps(clean)
    assert rec["work"]["eval_loss_after"] != rec["work"]["eval_loss_after"]  # input untouched
