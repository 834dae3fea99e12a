"""The regularised incomplete beta function and Student's t distribution, in double precision.

I_x(a, b) by the continued fraction of Numerical Recipes §6.4 (modified Lentz), with the
symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where it converges faster; the t CDF from it, and the t
quantile by bisection on the CDF (monotone, so it cannot miss; 200 halvings reach the
resolution of a double).
"""

from __future__ import annotations

import math

_EPS = 1e-16
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), a, b > 0, 0 ≤ x ≤ 1."""
    if not (a > 0 and b > 0):
        raise ValueError(f"betainc: a={a}, b={b}: both must be positive")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_sf2(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for T ~ t(df): the two-sided p-value, I_{df/(df+t²)}(df/2, 1/2)."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def student_t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for T ~ t(df)."""
    tail = 0.5 * student_t_sf2(t, df)
    return 1.0 - tail if t > 0 else tail


def student_t_ppf(q: float, df: float) -> float:
    """The q-quantile of t(df), 0 < q < 1."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"student_t_ppf: q={q} is not in (0, 1)")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -student_t_ppf(1.0 - q, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < q:  # bracket the quantile
        high *= 2.0
        if high > 1e300:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (low + high)
        if student_t_cdf(mid, df) < q:
            low = mid
        else:
            high = mid
        if high - low <= 1e-15 * max(1.0, high):
            break
    return 0.5 * (low + high)
