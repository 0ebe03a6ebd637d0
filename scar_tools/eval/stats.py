"""Paired bootstrap and effect size for comparing two methods on the same queries.

For per-query differences ``d_i = reference_i - baseline_i`` (``i = 1..n``):

* **mean difference**: ``mean(d)``;
* **interval**: the percentile interval of the bootstrap means (whole queries are resampled, so the
  pairing is kept);
* **p-value** (two-sided, against "no difference"): the bootstrap distribution is shifted to mean 0
  and ``p = (1 + #{b : |mean*_b - mean(d)| >= |mean(d)|}) / (B + 1)``;
* **Cohen's d for paired samples** (``d_z``): ``mean(d) / sd(d, ddof=1)``; ``None`` when ``n < 2``
  or every difference is equal.

Resamples are drawn with :func:`numpy.random.default_rng` ``(seed)``; every comparison made with
the same seed and ``n`` uses the same resamples, and all metrics share one matrix product.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from scar_core._errors import InvalidSettingsError

__all__ = ["DEFAULT_RESAMPLES", "PairedComparison", "paired_bootstrap", "paired_bootstrap_many"]

#: The paper's number of bootstrap resamples.
DEFAULT_RESAMPLES = 10_000
#: Drawn indices held in memory at once.
_BLOCK = 1 << 22


@dataclass(frozen=True)
class PairedComparison:
    """Reference minus baseline on one metric over the same ``n`` queries."""

    n: int
    reference_mean: float
    baseline_mean: float
    mean_difference: float
    ci_low: float
    ci_high: float
    p_value: float
    cohens_d: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        """The comparison as a JSON-ready dict."""
        return asdict(self)


def _bootstrap_means(
    rows: npt.NDArray[np.float64], resamples: int, seed: int
) -> npt.NDArray[np.float64]:
    """``(m, B)`` bootstrap means of ``m`` rows; resample ``b`` draws the same queries for all."""
    n = rows.shape[1]
    rng = np.random.default_rng(seed)
    per_block = max(1, _BLOCK // n)
    blocks = []
    for done in range(0, resamples, per_block):
        count = min(per_block, resamples - done)
        drawn = rng.integers(0, n, size=(count, n)) + (np.arange(count) * n)[:, None]
        tally = np.bincount(drawn.ravel(), minlength=count * n).reshape(count, n)
        blocks.append(tally.astype(np.float64) @ rows.T / n)
    return np.vstack(blocks).T


def paired_bootstrap_many(
    reference: npt.ArrayLike,
    baselines: Mapping[str, npt.ArrayLike],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, PairedComparison]:
    """Compare one reference with several baselines over the same queries, with shared resamples.

    Args:
        reference: Per-query values of the reference method.
        baselines: ``name -> per-query values``, same queries in the same order.
        n_resamples: Number of resamples ``B``.
        seed: Seed of the resampling.
        confidence: Coverage of the percentile interval, in ``(0, 1)``.

    Returns:
        ``name -> comparison`` (reference minus baseline).

    Raises:
        InvalidSettingsError: If a setting is out of range, there are no queries, or the
            baselines do not cover the same queries as the reference.
    """
    if not isinstance(n_resamples, int) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise InvalidSettingsError(
            f"n_resamples={n_resamples!r} is not valid; it must be an integer >= 1."
        )
    if not 0 < confidence < 1:
        raise InvalidSettingsError(f"confidence={confidence!r} is not valid; it must be in (0, 1).")
    ref = np.asarray(reference, dtype=np.float64)
    if ref.ndim != 1 or ref.size == 0:
        raise InvalidSettingsError(
            f"the reference must be a non-empty 1-D series, got shape {ref.shape}."
        )
    names = list(baselines)
    if not names:
        return {}
    base = [np.asarray(baselines[name], dtype=np.float64) for name in names]
    if any(b.shape != ref.shape for b in base):
        raise InvalidSettingsError("the reference and every baseline must cover the same queries.")
    differences = ref[None, :] - np.vstack(base)
    means = _bootstrap_means(differences, n_resamples, seed)
    tail = (1 - confidence) / 2
    results: dict[str, PairedComparison] = {}
    for row, name in enumerate(names):
        d = differences[row]
        observed = float(d.mean())
        low, high = np.quantile(means[row], [tail, 1 - tail])
        # A resample as far from the mean as 0 is counts as extreme; the tolerance keeps rounding
        # from deciding such a tie.
        tolerance = 1e-12 * max(1.0, float(np.abs(d).max()))
        extreme = int(np.count_nonzero(np.abs(means[row] - observed) >= abs(observed) - tolerance))
        spread = float(d.std(ddof=1)) if d.size >= 2 else 0.0
        results[name] = PairedComparison(
            n=int(d.size),
            reference_mean=float(ref.mean()),
            baseline_mean=float(base[row].mean()),
            mean_difference=observed,
            ci_low=float(low),
            ci_high=float(high),
            p_value=(1 + extreme) / (n_resamples + 1),
            cohens_d=observed / spread if spread > 0 else None,
        )
    return results


def paired_bootstrap(
    reference: npt.ArrayLike,
    baseline: npt.ArrayLike,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedComparison:
    """Compare two methods on the same queries (see the module docstring for the definitions).

    Example:
        >>> result = paired_bootstrap([3.0, 4.0, 5.0], [1.0, 2.0, 3.0], n_resamples=100)
        >>> result.mean_difference, result.ci_low, result.ci_high
        (2.0, 2.0, 2.0)
    """
    return paired_bootstrap_many(
        reference, {"baseline": baseline}, n_resamples=n_resamples, seed=seed, confidence=confidence
    )["baseline"]
