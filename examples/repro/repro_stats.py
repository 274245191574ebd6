"""The statistics every study's table reports over its seeds (examples/repro/*.py)."""
import math


def quantile(v, q):
    """numpy's linear quantile of the values that are not None; an infinite value (a run that
    never got there) stays infinite"""
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    p = q * (len(v) - 1)
    i = int(p)
    if i + 1 >= len(v) or p == i or v[i] == v[i + 1]:
        return v[i]
    if math.isinf(v[i + 1]):
        return math.inf
    return v[i] + (v[i + 1] - v[i]) * (p - i)


def mqi(v):
    """[median, 25% quantile, 75% quantile]"""
    return [quantile(v, 0.5), quantile(v, 0.25), quantile(v, 0.75)]
