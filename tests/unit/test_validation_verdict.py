"""The verdict of the scripts that hold the suite against bare loops
(``benchmarks.validation.judge``): a median inside the target is not enough when the rounds
themselves are not."""

from __future__ import annotations

from benchmarks.validation import judge


def test_rounds_split_by_the_load_are_inconclusive_not_met() -> None:
    # data_vs_bare on the shared 2-core VM, 2026-12-01: the median of four is the mean of the
    # middle two, 0.995, inside 0.95-1.05, while no round is
    rounds = [1.5239, 1.6143, 0.4653, 0.4528]
    met, verdict = judge(rounds, 0.95, 1.05)
    assert not met
    assert verdict.startswith("inconclusive: 0.995 is within, but only 0 of 4 rounds are")


def test_rounds_that_agree_meet_the_target() -> None:
    # TensorFlow's loader against its bare tf.data chain (docs/reference/training-level.md)
    met, verdict = judge([0.970, 0.978, 0.987, 0.992], 0.95, 1.05)
    assert met and verdict == "met (4 of 4 rounds within)"
    # one round off by a stall, the rest within: still met
    assert judge([0.991, 0.974, 1.004, 1.017, 0.985, 0.902], 0.97, 1.03)[0]


def test_a_median_outside_is_not_met_and_a_headline_decides_where_given() -> None:
    met, verdict = judge([1.10, 1.12, 1.08], 0.97, 1.03)
    assert not met and verdict == "NOT met (1.100; 0 of 3 rounds within)"
    # optimizer_vs_bare: the ratio of the two sides' medians decides, the rounds must agree
    assert not judge([1.0, 1.0, 1.0], 0.97, 1.03, headline=1.2)[0]
    assert judge([1.0, 1.01, 0.99], 0.97, 1.03, headline=1.0)[0]
    assert judge([], 0.97, 1.03) == (False, "no rounds")
