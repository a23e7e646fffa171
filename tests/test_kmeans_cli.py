"""The k-means command line (python -m jax_tsm2.clustering): progress over restarts and
iterations, compile time apart from time per iteration, and the same for scikit-learn."""

from __future__ import annotations

import re

import pytest

from jax_tsm2.clustering.__main__ import main, parser


def test_progress_bars_over_restarts_and_iterations(capsys):
    argv = ["--generate", "2000,3,40", "--n-init", "2", "--max-iter", "6", "--seed", "3"]
    assert main([*argv, "--precision", "tensorfloat32"]) == 0
    captured = capsys.readouterr()
    assert "restarts" in captured.err and "run 1/2" in captured.err and "run 2/2" in captured.err
    assert "inertia=" in captured.err  # the bar's live postfix
    done = re.search(r"compile (\S+) s, seeding (\S+) s, (\S+) ms per iteration", captured.out)
    assert done and float(done.group(1)) > 0 and float(done.group(3)) > 0
    assert "labels equal on 100.000%" in captured.out


def test_no_progress_and_verbose_lines(capsys):
    argv = ["--generate", "1000,2,3", "--max-iter", "4", "--no-progress", "--verbose"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "restarts" not in captured.err and "it/s" not in captured.err
    assert re.search(r"run 1 iter +1 +inertia", captured.out)


def test_compare_sklearn_times_both_apart(capsys):
    pytest.importorskip("sklearn")
    assert main(["--dataset", "wine", "--compare-sklearn", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"compile \S+ s, .* ms per iteration", out)
    assert re.search(r"scikit-learn \S+ .*(ms per iteration, fixed cost|in all)", out)
    assert "labels agree on 100.000%" in out


@pytest.mark.parametrize(
    "argv", [["--n-init", "0"], ["--precision", "tf32"], ["--n-init", "x"]], ids=str
)
def test_bad_new_flags_get_usage_and_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(argv)
    assert exit_.value.code == 2 and capsys.readouterr().err.startswith("usage:")
