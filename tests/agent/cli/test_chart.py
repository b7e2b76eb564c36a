"""The text frontier (agent/cli/chart.py)."""

from agent.cli.chart import frontier_chart, key_of


def test_points_are_letters_in_their_cells_within_the_width():
    xy = [(10.0, 1000.0), (50.0, 600.0), (100.0, 100.0)]
    lines = frontier_chart(xy, 60, "tok/s/user", "tok/s/GPU")
    assert all(len(line) <= 60 for line in lines)
    body = lines[1:-3]
    row_of = {key: next(i for i, line in enumerate(body) if key in line.split("|", 1)[1]) for key in "ABC"}
    assert row_of["A"] < row_of["B"] < row_of["C"]         # higher throughput, higher row
    column_of = {key: body[row_of[key]].index(key) for key in "ABC"}
    assert column_of["A"] < column_of["B"] < column_of["C"]  # more interactivity, further right
    assert body[0].strip().startswith("1,000") and lines[-2].rstrip().endswith("100")


def test_collisions_and_keys():
    lines = frontier_chart([(5.0, 5.0), (5.0, 5.0)], 40, "x", "y")
    assert "+" in "".join(lines) and frontier_chart([], 40, "x", "y") == []
    assert [key_of(i) for i in (0, 25, 26, 61, 62)] == ["A", "Z", "a", "9", "?"]
