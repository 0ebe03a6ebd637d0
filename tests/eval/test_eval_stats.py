"""The vectorised paired bootstrap against a plain loop over the same resamples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scar_core.errors import InvalidSettingsError
from scar_core.eval.stats import (
    bootstrap_means,
    cohens_d_paired,
    paired_bootstrap,
    paired_bootstrap_many,
)


def naive_bootstrap(
    reference: list[float], baseline: list[float], n_resamples: int, seed: int
) -> dict[str, float | None]:
    """One resample at a time, from the same draws: rng.integers(0, n, (B, n)), row b = resample b."""
    differences = np.array(reference, dtype=float) - np.array(baseline, dtype=float)
    n = len(differences)
    draws = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    means = []
    for b in range(n_resamples):
        total = 0.0
        for i in draws[b]:
            total += differences[i]
        means.append(total / n)
    observed = sum(differences) / n
    extreme = sum(1 for m in means if abs(m - observed) >= abs(observed))
    low, high = np.quantile(means, [0.025, 0.975])
    mean = observed
    variance = sum((d - mean) ** 2 for d in differences) / (n - 1)
    return {
        "mean_difference": observed,
        "ci_low": float(low),
        "ci_high": float(high),
        "p_value": (1 + extreme) / (n_resamples + 1),
        "cohens_d": None if variance == 0 else mean / variance**0.5,
    }


def test_matches_the_naive_loop_on_integer_counts() -> None:
    # Chunk counts: integer differences, so every mean is exact and the p-value count must agree.
    reference = [6, 5, 7, 5, 9, 6, 5, 8, 5, 6, 7]
    baseline = [11, 10, 13, 9, 12, 11, 10, 14, 9, 12, 10]
    got = paired_bootstrap(reference, baseline, n_resamples=300, seed=7).as_dict()
    expected = naive_bootstrap(reference, baseline, 300, 7)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key


def test_matches_the_naive_loop_on_recalls_with_a_small_difference() -> None:
    # A difference near zero, so that the p-value is far from its floor. Quarters over n = 8
    # queries keep every sum and mean exact in binary floating point, so ties (a resample mean
    # of exactly 0 or twice the mean) are decided identically by both implementations.
    reference = [1.0, 0.5, 1.0, 0.0, 0.25, 1.0, 0.5, 1.0]
    baseline = [1.0, 1.0, 0.5, 0.0, 0.75, 1.0, 0.5, 0.75]
    got = paired_bootstrap(reference, baseline, n_resamples=400, seed=3).as_dict()
    expected = naive_bootstrap(reference, baseline, 400, 3)
    assert 0.05 < expected["p_value"] < 1  # type: ignore[operator]
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 20), min_size=2, max_size=12),
    st.integers(0, 2**32 - 1),
    st.integers(1, 60),
)
def test_bootstrap_means_equal_the_loop(values: list[int], seed: int, n_resamples: int) -> None:
    draws = np.random.default_rng(seed).integers(0, len(values), size=(n_resamples, len(values)))
    expected = [float(np.mean([values[i] for i in row])) for row in draws]
    assert np.allclose(bootstrap_means(values, n_resamples, seed), expected)


def test_many_baselines_share_the_resamples_of_a_single_comparison() -> None:
    reference = [3.0, 1.0, 4.0, 1.0, 5.0]
    baselines = {"a": [2.0, 7.0, 1.0, 8.0, 2.0], "b": [8.0, 1.0, 8.0, 2.0, 8.0]}
    together = paired_bootstrap_many(reference, baselines, n_resamples=200, seed=11)
    for name, values in baselines.items():
        alone = paired_bootstrap(reference, values, n_resamples=200, seed=11)
        assert together[name] == alone


def test_blocks_of_resamples_follow_one_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several blocks must be stacked in draw order. With n = 4 (a power of two, so numpy's bounded
    # draws never reject) and 20 integers per block, block draws continue the one-block stream
    # exactly, so 10 blocks of 5 resamples must equal one block of 50.
    import scar_core.eval.stats as stats

    values = [1.0, 4.0, 2.0, 8.0]
    one_block = bootstrap_means(values, 50, 5)
    monkeypatch.setattr(stats, "_BLOCK_ELEMENTS", 20)  # 5 rows of 4 per block
    assert np.array_equal(bootstrap_means(values, 50, 5), one_block)


def test_constant_difference_has_a_degenerate_interval_and_no_effect_size() -> None:
    # Every difference is 2: all resample means are 2, the interval is [2, 2], sd = 0 -> d None,
    # and no resample deviates from the mean, so p = 1 / (B + 1).
    result = paired_bootstrap([3.0, 4.0, 5.0], [1.0, 2.0, 3.0], n_resamples=99, seed=0)
    assert (result.mean_difference, result.ci_low, result.ci_high) == (2.0, 2.0, 2.0)
    assert result.cohens_d is None
    assert result.p_value == pytest.approx(1 / 100)


def test_cohens_d_is_the_paired_dz() -> None:
    # d = [1, 2, 3]: mean 2, sd (ddof 1) = 1 -> d_z = 2.
    assert cohens_d_paired([1.0, 2.0, 3.0]) == pytest.approx(2.0)
    assert cohens_d_paired([1.0]) is None


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(InvalidSettingsError, match="n_resamples=0"):
        paired_bootstrap([1.0], [0.0], n_resamples=0)
    with pytest.raises(InvalidSettingsError, match="confidence"):
        paired_bootstrap([1.0], [0.0], confidence=1.5)
