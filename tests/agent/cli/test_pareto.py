"""`inferasim pareto` end to end on the real predictor (PRODUCT.md §2, METHOD §8): files,
JSON, the frontier table, and user errors as one line with exit code 2."""

import csv
import json
import sys

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from predictor.sweep.frontier import dominates

SMALL = ["--model", "llama-3.1-8b", "--cluster", "h100x2", "--engine", "vllm", "--workers", "1"]


@pytest.fixture()
def runner():
    return CliRunner()


def test_json_output_files_and_frontier(runner, tmp_path):
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"] == "Llama-3.1-8B" and data["workload"] == "1k/1k"
    assert data["num_points"] > 100 and data["wall_s"] > 0
    for name in ("points.csv", "frontier.csv", "sweep.json", "pareto.png"):
        assert (out / name).stat().st_size > 0
    with open(out / "points.csv") as handle:
        points = [(float(r["output_throughput_per_gpu"]), float(r["interactivity_p50"])) for r in csv.DictReader(handle)]
    assert len(points) == data["num_points"]
    frontier = [(p["output_throughput_per_gpu"], p["interactivity"]) for p in data["frontier"]]
    assert len(frontier) >= 3
    for point in data["frontier"]:
        assert point["mode"] in ("anchored", "rank-only") and point["configuration_text"] and point["configuration"]["tp"] >= 1
    # JSON rounds to 4 decimals and the CSV to 6 significant digits (2985.2465 is 2985.25
    # there): a point dominates a frontier point only beyond that rounding
    for xy in frontier:
        assert not any(dominates(p, (xy[0] * (1 + 1e-5), xy[1] * (1 + 1e-5))) for p in points)
    interactivity = [xy[1] for xy in frontier]
    assert interactivity == sorted(interactivity)   # ordered along the frontier
    throughput = [xy[0] for xy in frontier]
    assert throughput == sorted(throughput, reverse=True)


def test_table_output(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path / "o"), "--no-plot",
                                 "--no-disaggregated", "--max-spec-depth", "0"])
    assert result.exit_code == 0, result.output
    assert "Pareto frontier: Llama-3.1-8B on h100x2 (vllm), 1k/1k" in result.stdout
    assert "tok/s/GPU" in result.stdout and "predictions" in result.stdout
    assert not (tmp_path / "o" / "pareto.png").exists()
    assert "disaggregated=true" not in (tmp_path / "o" / "points.csv").read_text()


def test_max_points_caps_the_predictions(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--max-points", "40", "--json",
                                 "--no-plot"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 0 < data["num_priced"] <= 40 and data["num_sampled_out"] > 0


def test_agentic_workload_runs_the_des(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--workload", "agentic",
                                 "--max-points", "4", "--num-requests", "40", "--no-disaggregated",
                                 "--json", "--no-plot"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["workload"] == "agentic" and data["frontier"]
    assert all(point["source"] == "des" for point in data["frontier"])


def test_nothing_fits(runner, tmp_path):
    result = runner.invoke(app, ["pareto", "--model", "kimi-k3", "--cluster", "h100x1", "--engine", "vllm",
                                 "--out", str(tmp_path), "--no-plot"])
    assert result.exit_code == 1
    assert "no legal point" in result.stdout and "memory" in result.stdout


def test_only_anchored_without_anchors_says_why(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--modes", "anchored", "--no-plot"])
    assert result.exit_code == 1
    assert "excluded by --modes (they are rank-only" in result.stdout


def test_only_anchored_after_sampling_says_to_raise_max_points(runner, tmp_path):
    """The mode filter runs on what --max-points kept: the message names both (it once said
    'the others are rank-only or anchored' to a user who asked for anchored points)."""
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--modes", "anchored", "--max-points", "3",
                                 "--no-plot"])
    assert result.exit_code == 1
    assert "(they are rank-only" in result.stdout and "raise it to reach more" in result.stdout
    assert "rank-only or anchored" not in result.stdout


@pytest.mark.parametrize("args, needle", [
    (["--modes", "measured"], "--modes"),
    (["--workload", "1k"], "--workload"),
])
def test_bad_input_is_one_line_exit_2(runner, tmp_path, args, needle):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert needle in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_ray_not_installed_names_the_extra(runner, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--ray", "auto"])
    assert result.exit_code == 2
    assert "inferasim[ray]" in result.stderr


def test_frontier_rule_options(runner, tmp_path):
    base = ["pareto", *SMALL, "--no-plot", "--no-disaggregated", "--max-spec-depth", "0", "--json"]
    capped = json.loads(runner.invoke(app, [*base, "--out", str(tmp_path / "a"), "--ttft-max", "0.03"]).stdout)
    free = json.loads(runner.invoke(app, [*base, "--out", str(tmp_path / "b"), "--ttft-max", "none"]).stdout)
    assert capped["frontier_rule"]["ttft_max_ms"] == pytest.approx(30.0) and free["frontier_rule"]["ttft_max_ms"] is None
    assert all(p["metrics"]["ttft_ms_mean"] <= 30.0 for p in capped["frontier"])
    assert capped["num_ineligible"] > 0 and free["num_ineligible"] == 0
    floor = json.loads(runner.invoke(app, [*base, "--out", str(tmp_path / "c"), "--slo", "interactivity>=200"]).stdout)
    assert floor["frontier"] and all(p["interactivity"] >= 200 for p in floor["frontier"])
    # a rule no point meets leaves an empty frontier: said, files written, exit 1 (as a search with no best)
    none = runner.invoke(app, [*base[:-1], "--out", str(tmp_path / "d"), "--slo", "interactivity>=100000"])
    assert none.exit_code == 1 and "no point meets the frontier rule" in none.stdout
    assert (tmp_path / "d").is_dir()


@pytest.mark.parametrize("args, message", [
    (["--ttft-max", "soon"], "--ttft-max: "),
    (["--ttft-max", "0"], "--ttft-max: "),
    (["--slo", "p99-itl<=50"], "--slo: p99-itl<=50ms bounds itl_ms_p99, which sweep points do not record"),
])
def test_bad_frontier_rule_is_exit_2(runner, tmp_path, args, message):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), *args])
    assert result.exit_code == 2 and message in result.stderr


def test_terminal_chart_uses_the_table_keys(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--no-plot", "--no-disaggregated",
                                 "--max-spec-depth", "0"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    chart = [line for line in lines if " |" in line]
    keys = [line.split()[0] for line in lines if line[:2].strip() and line.split()[0] in "ABCDEFGHIJ" and
            len(line.split()[0]) == 1]
    bodies = [line.split("|", 1)[1] for line in chart]
    drawn = [key for key in keys if any(key in body for body in bodies)]
    # points sharing a cell are drawn as one '+' (each hides two keys or more)
    collisions = sum(body.count("+") for body in bodies)
    assert len(keys) >= 3 and len(drawn) >= 3 and len(keys) - len(drawn) >= 2 * collisions
    assert (len(drawn) == len(keys)) == (collisions == 0)


def test_off_a_terminal_progress_is_a_line_per_tenth_on_stderr(runner, tmp_path, monkeypatch):
    """A sweep logged to a file (CI, nohup) still shows its progress and ETA: on stderr,
    where it leaves --json's stdout parseable; a sweep done in under `PROGRESS_QUIET_S`
    prints none."""
    import agent.cli.pareto as pareto

    quick = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--no-plot", "--json"])
    assert quick.exit_code == 0 and not [line for line in quick.stderr.splitlines() if line.startswith("pricing: ")]
    monkeypatch.setattr(pareto, "PROGRESS_QUIET_S", 0.0)
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--no-plot", "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    lines = [line for line in result.stderr.splitlines() if line.startswith("pricing: ")]
    assert 2 <= len(lines) <= 11
    assert "groups" in lines[-1] and "ETA" in lines[-1]
    done, total = lines[-1].split()[1].split("/")
    assert done == total


def test_a_tail_bound_on_a_fixed_length_sweep_is_refused_not_ignored(runner, tmp_path):
    """Analytical points record means, not tails: `--slo p90-itl<=10` admitted every point
    (a missing metric counts as met) while the output said the frontier met it."""
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--slo", "p90-itl<=10", "--no-plot"])
    assert result.exit_code == 2 and "which a fixed-length sweep does not record" in result.stderr
    assert "Traceback" not in result.output
    # one accepted list for both refusals: what every sweep records, then the DES's tails
    # (it offered "a median ttft", which the unrecorded-SLO error refuses)
    unrecorded = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--slo", "p50-ttft<=500", "--no-plot"])
    accepted = lambda text: " ".join(text.split()).split("(accepted: ")[-1]   # noqa: E731
    assert unrecorded.exit_code == 2 and accepted(unrecorded.stderr) == accepted(result.stderr)
    assert "p50-ttft" not in accepted(result.stderr) and "also p90-itl, p90-ttft" in accepted(result.stderr)
    assert runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--slo", "itl<=30", "--no-plot",
                               "--max-points", "20"]).exit_code == 0


def test_the_table_says_total_and_output_throughput(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--no-plot", "--max-points", "20"],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "total tok/s" in result.stdout and "output tok/s" in result.stdout


def test_a_replay_length_on_a_fixed_length_sweep_is_refused_not_ignored(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--num-requests", "5", "--no-plot"])
    assert result.exit_code == 2 and "--num-requests" in result.stderr and "priced analytically" in result.stderr


def test_an_unrecorded_slo_names_the_slo_spellings_a_sweep_records(runner, tmp_path):
    result = runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--slo", "p50-e2e<=5s", "--no-plot"])
    assert result.exit_code == 2 and "p90-itl" in result.stderr and "interactivity" in result.stderr
    assert "_lo" not in result.stderr and "ttft_ms_mean" not in result.stderr


def test_a_sweep_without_a_plot_leaves_no_earlier_figure_beside_its_files(runner, tmp_path):
    (tmp_path / "pareto.png").write_bytes(b"an earlier sweep's figure")
    assert runner.invoke(app, ["pareto", *SMALL, "--out", str(tmp_path), "--no-plot"]).exit_code == 0
    assert not (tmp_path / "pareto.png").exists() and (tmp_path / "sweep.json").exists()


def test_an_engine_without_split_pools_is_said_to_sweep_none(runner, tmp_path):
    """ATOM's launch has no prefill/decode pool flags: the sweep leaves splits out, and says so."""
    result = runner.invoke(app, ["pareto", "--model", "gpt-oss-120b", "--engine", "atom", "--max-points", "10",
                                 "--max-spec-depth", "0", "--out", str(tmp_path / "a"), "--no-plot"])
    assert result.exit_code == 0, result.output
    assert "no prefill/decode splits swept: atom's launch cannot start split pools" in " ".join(result.stdout.split())
    other = runner.invoke(app, ["pareto", "--model", "gpt-oss-120b", "--engine", "sglang", "--max-points", "10",
                                "--max-spec-depth", "0", "--out", str(tmp_path / "b"), "--no-plot"])
    assert other.exit_code == 0 and "no prefill/decode splits swept" not in other.stdout
