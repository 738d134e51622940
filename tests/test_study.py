"""Study helpers: run labels round-trip, and seeds condense into mean and range per (algorithm, dtype)."""
import pytest

from nbkit.rl import RLConfig, study


def test_labels_round_trip_with_and_without_a_seed():
    for algorithm, dtype, seed in [("grpo", "fp16", None), ("grpo_token_tis", "bf16", 3), ("pg_seq_is", "fp32", 0)]:
        assert study.parse_label(study.run_label(algorithm, dtype, seed)) == (algorithm, dtype, seed)


def _rows(accuracies):
    return [{"step": i + 1, "accuracy": a} for i, a in enumerate(accuracies)]


def test_seed_summary_gives_mean_range_and_how_many_seeds_passed():
    runs = {"grpo-fp16-s0": _rows([0.5] * 5 + [1.0] * 10), "grpo-fp16-s1": _rows([0.5] * 10 + [1.0] * 5),
            "grpo-bf16-s0": _rows([0.5] * 15), "grpo-bf16-s1": _rows([0.9] * 15)}
    table = study.seed_summary(study.summary_table(runs, target=0.95, window=5), target=0.95, window=5)
    by = {(r["algorithm"], r["dtype"]): r for r in table}
    fp16, bf16 = by[("grpo", "fp16")], by[("grpo", "bf16")]
    assert fp16["seeds"] == 2 and fp16["reached 95%"] == "2/2"
    assert fp16["steps to 95% (each)"] == [10, 15] and fp16["steps to 95% (mean)"] == 12.5
    assert fp16["final accuracy (mean)"] == 1.0
    assert bf16["reached 95%"] == "0/2" and bf16["steps to 95% (mean)"] is None
    assert bf16["final accuracy [min, max]"] == [0.5, 0.9] and bf16["final accuracy (mean)"] == pytest.approx(0.7)


def test_run_grid_refuses_repeated_or_empty_seed_lists(tmp_path):
    base = RLConfig(output_dir=str(tmp_path))
    for bad in ([], [1, 1]):
        with pytest.raises(ValueError, match="seeds"):
            study.run_grid(base, ["grpo"], ["fp16"], seeds=bad)
