"""Paired bootstrap and effect sizes for comparing two methods on the same queries.

For per-query differences ``d_i = reference_i - baseline_i`` (``i = 1..n``):

* **mean difference**: ``mean(d)``;
* **95% interval**: the 2.5th and 97.5th percentiles of the bootstrap means, each bootstrap mean
  being the mean of ``n`` differences drawn with replacement (whole queries are resampled, so the
  pairing is kept);
* **p-value** (two-sided, against "no difference"): the bootstrap distribution is shifted to mean 0
  and ``p = (1 + #{b : |mean*_b - mean(d)| >= |mean(d)|}) / (B + 1)``, ties within rounding
  counted. With ``B = 10,000`` the smallest reportable p is about ``1e-4``;
* **Cohen's d for paired samples** (``d_z``): ``mean(d) / sd(d)`` with the sample standard
  deviation (``ddof = 1``); undefined (``None``) when ``n < 2`` or every difference is equal.

Resamples are drawn with :func:`numpy.random.default_rng` ``(seed).integers(0, n, (rows, n))`` in
blocks of rows and turned into counts, so all ``B`` means of many metrics come from one matrix
product per block. Every comparison made with the same seed and ``n`` uses the same resamples.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scar_core.errors import InvalidSettingsError

__all__ = [
    "DEFAULT_RESAMPLES",
    "PairedComparison",
    "bootstrap_means",
    "cohens_d_paired",
    "paired_bootstrap",
    "paired_bootstrap_many",
]

#: The paper's number of bootstrap resamples.
DEFAULT_RESAMPLES = 10_000

#: Relative tolerance below which a resample's distance from the mean counts as a tie.
_TIE_TOLERANCE = 1e-12

#: Upper bound on the number of drawn indices held in memory at once.
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class PairedComparison:
    """Reference minus baseline on one metric over the same queries.

    Attributes:
        n: Number of paired queries.
        reference_mean: Mean of the reference method.
        baseline_mean: Mean of the baseline.
        mean_difference: ``reference_mean - baseline_mean``.
        ci_low: Lower end of the percentile interval of the mean difference.
        ci_high: Upper end.
        p_value: Two-sided bootstrap p-value (see the module docstring).
        cohens_d: Paired ``d_z``, or ``None`` when undefined.
    """

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
        return {
            "n": self.n,
            "reference_mean": self.reference_mean,
            "baseline_mean": self.baseline_mean,
            "mean_difference": self.mean_difference,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "cohens_d": self.cohens_d,
        }


def _check_resamples(n_resamples: int) -> None:
    if not isinstance(n_resamples, int) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise InvalidSettingsError(
            f"n_resamples={n_resamples!r} is not valid; it must be an integer >= 1 "
            f"(the paper uses {DEFAULT_RESAMPLES})."
        )


def _count_blocks(n: int, n_resamples: int, seed: int) -> Iterator[npt.NDArray[np.float64]]:
    """Yield ``(rows, n)`` matrices: how often each query was drawn in each resample."""
    rng = np.random.default_rng(seed)
    rows_per_block = max(1, _BLOCK_ELEMENTS // max(n, 1))
    done = 0
    while done < n_resamples:
        rows = min(rows_per_block, n_resamples - done)
        drawn = rng.integers(0, n, size=(rows, n))
        flat = (drawn + (np.arange(rows) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(np.float64)
        done += rows


def bootstrap_means(
    values: npt.ArrayLike, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> npt.NDArray[np.float64]:
    """Return the bootstrap means of each row of ``values``.

    Args:
        values: A ``(m, n)`` array (``m`` series over the same ``n`` queries) or a 1-D array.
        n_resamples: Number of resamples ``B``.
        seed: Seed of the resampling.

    Returns:
        An ``(m, B)`` array (``(B,)`` for 1-D input): resample ``b`` uses the same queries for
        every series.
    """
    _check_resamples(n_resamples)
    matrix = np.asarray(values, dtype=np.float64)
    one_dimensional = matrix.ndim == 1
    matrix = np.atleast_2d(matrix)
    n = matrix.shape[1]
    if n == 0:
        raise InvalidSettingsError("cannot bootstrap over zero queries.")
    blocks = [counts @ matrix.T / n for counts in _count_blocks(n, n_resamples, seed)]
    means = np.vstack(blocks).T
    return means[0] if one_dimensional else means


def cohens_d_paired(differences: npt.ArrayLike) -> float | None:
    """Return ``mean(d) / sd(d, ddof=1)``, or ``None`` when ``n < 2`` or ``sd(d) == 0``."""
    array = np.asarray(differences, dtype=np.float64)
    if array.size < 2:
        return None
    spread = float(array.std(ddof=1))
    if spread == 0:
        return None
    return float(array.mean()) / spread


def paired_bootstrap_many(
    reference: npt.ArrayLike,
    baselines: Mapping[str, npt.ArrayLike],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, PairedComparison]:
    """Compare one reference against several baselines with shared resamples.

    Args:
        reference: Per-query values of the reference method.
        baselines: ``name -> per-query values`` over the same queries, in the same order.
        n_resamples: Number of resamples ``B``.
        seed: Seed of the resampling.
        confidence: Coverage of the percentile interval, in ``(0, 1)``.

    Returns:
        ``name -> comparison`` (reference minus baseline).
    """
    if not 0 < confidence < 1:
        raise InvalidSettingsError(f"confidence={confidence!r} is not valid; it must be in (0, 1).")
    reference_values = np.asarray(reference, dtype=np.float64)
    names = list(baselines)
    if not names:
        return {}
    differences = np.vstack(
        [reference_values - np.asarray(baselines[name], dtype=np.float64) for name in names]
    )
    if differences.shape[1] != reference_values.shape[0]:
        raise InvalidSettingsError("the reference and the baselines must cover the same queries.")
    means = bootstrap_means(differences, n_resamples, seed)
    tail = (1 - confidence) / 2
    results: dict[str, PairedComparison] = {}
    for row, name in enumerate(names):
        observed = float(differences[row].mean())
        boot = means[row]
        low, high = np.quantile(boot, [tail, 1 - tail])
        # A resample exactly as far from the mean as 0 is, counts as extreme; the tolerance keeps
        # such a tie from being decided by rounding.
        tolerance = _TIE_TOLERANCE * max(1.0, float(np.abs(differences[row]).max()))
        extreme = int(np.count_nonzero(np.abs(boot - observed) >= abs(observed) - tolerance))
        results[name] = PairedComparison(
            n=int(differences.shape[1]),
            reference_mean=float(reference_values.mean()),
            baseline_mean=float(np.asarray(baselines[name], dtype=np.float64).mean()),
            mean_difference=observed,
            ci_low=float(low),
            ci_high=float(high),
            p_value=(1 + extreme) / (n_resamples + 1),
            cohens_d=cohens_d_paired(differences[row]),
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
    """Compare two methods on the same queries. See the module docstring for the definitions.

    Example:
        >>> result = paired_bootstrap([3.0, 4.0, 5.0], [1.0, 2.0, 3.0], n_resamples=100)
        >>> result.mean_difference, result.ci_low, result.ci_high
        (2.0, 2.0, 2.0)
    """
    return paired_bootstrap_many(
        reference,
        {"baseline": baseline},
        n_resamples=n_resamples,
        seed=seed,
        confidence=confidence,
    )["baseline"]
