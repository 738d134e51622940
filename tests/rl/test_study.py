"""Study helpers: run labels round-trip, and seeds condense into mean and range per (algorithm, dtype)."""

import pytest

from nbkit.records import runlog
from nbkit.rl import RLConfig
from nbkit.rl.grid import train_grid


def test_run_labels_name_folders_with_and_without_a_seed():
    assert runlog.run_label("grpo", "fp16") == "grpo-fp16"
    assert runlog.run_label("grpo_token_tis", "bf16", 3) == "grpo_token_tis-bf16-s3"


def test_a_runs_coordinates_are_read_from_its_config_json_not_its_folder_name(tmp_path):
    import json

    folder = tmp_path / "any-name-at-all"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "accuracy": 1.0}) + "\n")
    (folder / "config.json").write_text(
        json.dumps(RLConfig(algorithm="gspo", train_dtype="bf16", seed=4, rollout_dtype="fp32").to_dict())
    )
    assert runlog.load_meta(tmp_path) == {
        "any-name-at-all": {"algorithm": "gspo", "train": "bf16", "rollout": "fp32", "dtype": "bf16-fp32r", "seed": 4}
    }


def _rows(accuracies):
    return [{"step": i + 1, "accuracy": a} for i, a in enumerate(accuracies)]


def test_seed_summary_gives_mean_range_and_how_many_seeds_passed():
    runs = {
        "grpo-fp16-s0": _rows([0.5] * 5 + [1.0] * 10),
        "grpo-fp16-s1": _rows([0.5] * 10 + [1.0] * 5),
        "grpo-bf16-s0": _rows([0.5] * 15),
        "grpo-bf16-s1": _rows([0.9] * 15),
    }
    meta = {k: runlog.coords({"algorithm": "grpo", "train_dtype": k.split("-")[1], "seed": int(k[-1])}) for k in runs}
    table = runlog.seed_summary(runlog.summary_table(runs, target=0.95, window=5), meta, target=0.95, window=5)
    by = {(r["algorithm"], r["dtype"]): r for r in table}
    fp16, bf16 = by[("grpo", "fp16")], by[("grpo", "bf16")]
    assert fp16["seeds"] == 2 and fp16["reached 95%"] == "2/2"
    assert fp16["steps to 95% (each)"] == [10, 15] and fp16["steps to 95% (mean)"] == 12.5
    assert fp16["final accuracy (mean)"] == 1.0
    assert bf16["reached 95%"] == "0/2" and bf16["steps to 95% (mean)"] is None
    assert bf16["final accuracy [min, max]"] == [0.5, 0.9] and bf16["final accuracy (mean)"] == pytest.approx(0.7)


def test_the_primary_comparison_gives_the_fp16_minus_bf16_difference_with_its_ci_and_what_it_could_detect():
    # FP16 reaches 95 % at steps 10, 12, 14; BF16 at 20, 22, 24: difference −10, pooled SD 2, SE 2·sqrt(2/3) = 1.633,
    # t(0.975, 4) = 2.776: CI −10 ± 4.53
    acc = {"fp16": (6, 8, 10), "bf16": (16, 18, 20)}
    runs = {f"grpo-{d}-s{i}": _rows([0.5] * k + [1.0] * 10) for d, ks in acc.items() for i, k in enumerate(ks)}
    meta = {k: runlog.coords({"algorithm": "grpo", "train_dtype": k.split("-")[1], "seed": int(k[-1])}) for k in runs}
    table = runlog.summary_table(runs, target=0.95, window=5)
    (line,) = runlog.precision_comparison(table, meta, target=0.95)
    assert line.startswith("grpo: FP16 − BF16 steps to 95% -10 (95% CI -14.5 to -5.47;")
    assert "FP16 reached it sooner" in line
    # the same seeds with BF16 as fast: the CI covers 0 and the sentence says what the seeds could have found
    runs.update({f"grpo-bf16-s{i}": _rows([0.5] * k + [1.0] * 10) for i, k in enumerate((8, 6, 10))})
    (line,) = runlog.precision_comparison(runlog.summary_table(runs, target=0.95, window=5), meta, target=0.95)
    assert "no difference shown" in line and "80% power only from 5.91 steps up" in line  # (2.776 + 0.842) x 1.633
    assert "primary comparison (FP16 − BF16 steps to target)" in runlog.headline(runs, meta, target=0.95)
    one = {k: v for k, v in runs.items() if not k.endswith(("s1", "s2"))}  # one seed each: no CI
    assert "too few seeds" in runlog.precision_comparison(runlog.summary_table(one, 0.95), meta, 0.95)[0]


def test_run_grid_refuses_repeated_or_empty_seed_lists(tmp_path):
    base = RLConfig(output_dir=str(tmp_path))
    for bad in ([], [1, 1]):
        with pytest.raises(ValueError, match="seeds"):
            train_grid(base, ["grpo"], ["fp16"], seeds=bad)
