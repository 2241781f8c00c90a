"""The report's statistics are registered objects (harness/report/stats.py Statistic, registry STATISTICS): a
suite names one, the report asks it for its point estimate, interval, label and words, and a statistic
registered by a plugin is printed like a built-in one."""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.registry import STATISTICS
from harness.report import stats


@pytest.fixture
def median():
    """A plugin's statistic: the median with a percentile bootstrap from 5 seeds, the mean below."""
    statistic = stats.Statistic("median", "median", lambda x, axis=-1: np.median(x, axis=axis), stats.BOOTSTRAP,
                                "the median", min_seeds=stats.MIN_CONFIDENT_SEEDS, fallback=stats.MEAN)
    STATISTICS.register("median")(statistic)
    yield statistic
    STATISTICS._entries.pop("median")


def test_the_suites_names_are_the_registered_objects_and_an_unknown_one_is_one_line():
    assert STATISTICS.names()[:2] == ["iqm", "mean"]
    assert stats.named("iqm") is stats.IQM and stats.named("mean") is stats.MEAN
    with pytest.raises(ConfigError) as exc:
        stats.named("median")
    assert str(exc.value) == "report.statistic: 'median' is not valid; choose one of iqm, mean"


def test_the_built_ins_words_are_the_reports():
    # the captions' words, as the report printed them when the statistic was a string
    assert stats.cell_rule(stats.IQM) == ("the IQM over seeds (mean of the middle 50%) with a 95% percentile bootstrap "
                                          "interval, or with fewer than 5 seeds the mean with a Student-t interval")
    assert stats.cell_rule(stats.IQM, None) == "the IQM over seeds; the mean below 5 seeds"
    assert stats.cell_rule(stats.MEAN, "band") == "the mean over seeds with a 95% Student-t band"
    assert stats.cell_rule(stats.MEAN, None) == "the mean over seeds"
    assert stats.table_rule(stats.IQM) == ("IQM over seeds [95% bootstrap CI] (the mean [Student-t CI] in cells with "
                                           "fewer than 5 seeds)")
    assert stats.table_rule(stats.MEAN) == "mean over seeds [95% Student-t CI]"
    assert stats.difference_rule(stats.MEAN) == "mean, Welch t interval; * = fewer than 5 seeds a side (low confidence)"
    assert stats.difference_rule(stats.IQM) == ("IQM bootstrap with >= 5 seeds a side; * = fewer seeds (mean, Welch t "
                                                "interval)")


def test_the_mean_is_the_mean_with_a_t_interval_at_every_seed_count():
    # 5 seeds 0.30 0.40 0.41 0.42 0.90: mean 2.43/5 = 0.486 (the IQM would trim 0.30 and 0.90: 0.41)
    x = np.array([0.30, 0.40, 0.41, 0.42, 0.90])
    e = stats.estimate(x, statistic=stats.MEAN)
    assert (e.point, e.statistic, e.method) == (pytest.approx(0.486, abs=1e-12), "mean", "t")
    assert (e.lo, e.hi) == stats.t_interval(x)
    d = stats.difference_estimate(x, x - 0.1, statistic=stats.MEAN)
    assert (d.point, d.statistic, d.method) == (pytest.approx(0.1, abs=1e-12), "mean", "t")
    assert (d.lo, d.hi) == stats.welch_interval(x, x - 0.1)


def test_a_registered_statistic_is_printed_like_a_built_in(median, tmp_path):
    from harness.config.expand import parse_suite

    # 5 seeds: the median 0.41 with its bootstrap interval; 3 seeds: the fallback, the mean 0.5
    x = np.array([0.30, 0.40, 0.41, 0.42, 0.90])
    e = stats.estimate(x, statistic=median)
    assert (e.point, e.statistic, e.method) == (pytest.approx(0.41), "median", "bootstrap")
    assert (e.lo, e.hi) == stats.bootstrap_ci(x, median.point)
    e = stats.estimate(np.array([0.4, 0.5, 0.6]), statistic=median)
    assert (e.point, e.statistic, e.method) == (pytest.approx(0.5), "mean", "t")
    # IQM(0.30 .. 0.90) − IQM(x − 0.2) would trim; the medians differ by exactly 0.2
    d = stats.difference_estimate(x, x - 0.2, statistic=median)
    assert (d.point, d.statistic, d.method) == (pytest.approx(0.2, abs=1e-12), "median", "bootstrap")
    assert stats.cell_rule(median, None) == "the median over seeds; the mean below 5 seeds"
    suite = parse_suite({"suite": "med", "base": {}, "grid": {"algorithm": ["grpo"]}, "report": {"statistic": "median"}})
    assert stats.named(suite.report.statistic) is median
