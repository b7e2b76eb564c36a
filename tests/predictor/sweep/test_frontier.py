"""The Pareto frontier (METHOD §8): exactly the non-dominated points, both axes maximised."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.sweep.frontier import dominates, pareto_indices


def brute_force(points: list[tuple[float, float]]) -> list[int]:
    return [i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)]


def test_constructed_set():
    points = [
        (10.0, 1.0),   # 0 best throughput-like axis: frontier
        (8.0, 3.0),    # 1 frontier
        (8.0, 2.0),    # 2 dominated by 1 (same x, lower y)
        (5.0, 3.0),    # 3 dominated by 1 (lower x, same y)
        (4.0, 6.0),    # 4 frontier
        (1.0, 6.0),    # 5 dominated by 4
        (0.5, 7.0),    # 6 frontier (best second axis)
        (4.0, 6.0),    # 7 duplicate of 4: neither dominates the other, both kept
        (3.0, 5.0),    # 8 dominated by 4
    ]
    xs, ys = zip(*points)
    assert pareto_indices(xs, ys) == [0, 1, 4, 6, 7]
    prefer = [0, 0, 0, 0, 5, 0, 0, 2, 0]    # 7 ties with 4 and is preferred
    assert pareto_indices(xs, ys, prefer) == [0, 1, 6, 7]


def test_missing_and_non_finite_values_are_never_on_the_frontier():
    xs = [1.0, math.nan, 100.0, None, 2.0, math.inf]
    ys = [1.0, 100.0, None, 100.0, 0.5, 1.0]
    assert pareto_indices(xs, ys) == [0, 4]


def test_empty_and_mismatched_inputs():
    assert pareto_indices([], []) == []
    with pytest.raises(ValueError):
        pareto_indices([1.0], [])
    with pytest.raises(ValueError):
        pareto_indices([1.0], [1.0], prefer=[])


# Coordinates on a small grid so ties and duplicates are common.
coordinate = st.one_of(st.integers(0, 6).map(float), st.floats(0, 10, allow_nan=False, allow_infinity=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(coordinate, coordinate), max_size=60))
def test_frontier_is_exactly_the_non_dominated_points(points):
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    chosen = pareto_indices(xs, ys)
    assert chosen == brute_force(points)
    on = set(chosen)
    for i in on:  # no frontier point is dominated by any point
        assert not any(dominates(points[j], points[i]) for j in range(len(points)))
    for i in set(range(len(points))) - on:  # every point off it is dominated by a frontier point
        assert any(dominates(points[j], points[i]) for j in on)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(coordinate, coordinate, st.integers(0, 3)), max_size=60))
def test_prefer_keeps_one_point_per_frontier_coordinate(rows):
    points = [(x, y) for x, y, _ in rows]
    keys = [k for _, _, k in rows]
    chosen = pareto_indices([p[0] for p in points], [p[1] for p in points], keys)
    non_dominated = brute_force(points)
    assert sorted({points[i] for i in chosen}) == sorted({points[i] for i in non_dominated})
    assert len(chosen) == len({points[i] for i in chosen})
    for i in chosen:  # the smallest key (then the lowest index) among the ties
        ties = [j for j in range(len(points)) if points[j] == points[i]]
        assert i == min(ties, key=lambda j: (keys[j], j))
