"""The precision ablation grid: every (train, rollout) pair trains, its audit records both sides' real dtypes, and a
rollout engine built in another dtype than requested stops the run."""

import pytest

from nbkit.records import runlog
from nbkit.rl import RLConfig
from nbkit.rl import rollout as rollout_mod
from nbkit.rl.amp import PrecisionError
from nbkit.rl.grid import train_grid
from nbkit.studies import ablation


@pytest.fixture(scope="module")
def tiny(tiny_random_model, arith_jsonl):
    return tiny_random_model, arith_jsonl


def _base(tmp_path, tiny, **kw):
    model, data = tiny
    return RLConfig(
        **{
            **dict(
                model=model,
                dataset=data,
                max_steps=1,
                prompts_per_step=2,
                num_generations=2,
                max_completion_length=8,
                rollout_engine="hf",
                output_dir=str(tmp_path),
            ),
            **kw,
        }
    )


def test_pair_labels_name_folders_and_coordinates_come_from_the_config():
    assert runlog.run_label("grpo", runlog.pair_tag("bf16", "fp32"), 0) == "grpo-bf16-fp32r-s0"
    assert runlog.run_label("grpo", runlog.pair_tag("fp16", "fp16"), 1) == "grpo-fp16-s1"
    grid = ablation.Ablation().grid(pairs=[["bf16", "fp32"], ["fp16", "fp16"]], seeds=[2], rollout_engine="hf")
    assert sorted(grid) == ["grpo-bf16-fp32r-s2", "grpo-fp16-s2"]
    assert runlog.coords(grid["grpo-bf16-fp32r-s2"].to_dict()) == {
        "algorithm": "grpo",
        "train": "bf16",
        "rollout": "fp32",
        "dtype": "bf16-fp32r",
        "seed": 2,
    }
    assert runlog.coords(grid["grpo-fp16-s2"].to_dict())["rollout"] == "fp16"  # None: the training dtype


@pytest.mark.slow
def test_the_grid_trains_every_pair_and_audits_both_sides(tmp_path, tiny):
    results = train_grid(_base(tmp_path, tiny), ["grpo"], [], seeds=[0], pairs=ablation.PAIRS, progress=False)
    assert sorted(results) == sorted(["grpo-bf16-s0", "grpo-bf16-fp32r-s0", "grpo-fp16-s0", "grpo-fp32-s0"])
    runs, meta = runlog.load_runs(tmp_path), runlog.load_meta(tmp_path)
    for label, rows in runs.items():
        train_dtype, rollout_dtype = meta[label]["train"], meta[label]["rollout"]
        assert set(rows[0]["audit/matmul_dtypes"]) == {train_dtype}
        assert rows[0]["audit/rollout_dtype"] == rollout_dtype


def test_pairs_and_dtypes_together_or_repeated_pairs_are_refused(tmp_path):
    for dtypes, pairs in ((["fp16"], [("fp16", "fp32")]), ([], [("fp16", "fp32")] * 2), ([], [])):
        with pytest.raises(ValueError, match="pairs must be"):
            train_grid(RLConfig(output_dir=str(tmp_path)), ["grpo"], dtypes, pairs=pairs)


@pytest.mark.slow
def test_a_rollout_engine_built_in_another_dtype_than_requested_fails_the_run(tmp_path, tiny, monkeypatch):
    real = rollout_mod.HFEngine

    def fp32_engine(model_ref, dtype, **kw):  # a backend that ignores the requested dtype
        return real(model_ref, "fp32", **kw)

    monkeypatch.setattr(rollout_mod, "HFEngine", fp32_engine)
    with pytest.raises(PrecisionError, match="requested a bf16 rollout but the engine holds fp32 weights"):
        train_grid(_base(tmp_path, tiny), ["grpo"], [], pairs=[("fp32", "bf16")], progress=False)


def _rows(acc, rollout, update, dtype_pair):
    return [
        {
            "step": i + 1,
            "accuracy": a,
            "mismatch/token_abs_logp_diff/mean": 1e-3,
            "mismatch/kl_k3": 1e-6,
            "time/rollout": rollout,
            "time/sync": 0.0,
            "time/update": update,
            "time/step": rollout + update,
            "audit/rollout_dtype": dtype_pair[1],
            "audit/matmul_dtypes": [dtype_pair[0]],
        }
        for i, a in enumerate(acc)
    ]


def meta_of(runs: dict) -> dict:
    """Each run's coordinates as its config would give them (here the test names its pair in the label)."""
    out = {}
    for label in runs:
        algorithm, *tag, seed = label.split("-")
        train, rollout = tag[0], (tag[1][:-1] if len(tag) > 1 else tag[0])
        out[label] = runlog.coords(
            {"algorithm": algorithm, "train_dtype": train, "rollout_dtype": rollout, "seed": int(seed[1:])}
        )
    return out


def test_the_table_groups_seeds_by_pair_and_splits_the_step_time():
    runs = {
        "grpo-bf16-fp32r-s0": _rows([1.0] * 10, 3.0, 1.0, ("bf16", "fp32")),
        "grpo-bf16-fp32r-s1": _rows([0.5] * 10, 3.0, 1.0, ("bf16", "fp32")),
        "grpo-fp16-s0": _rows([0.5] * 5 + [1.0] * 5, 1.0, 1.0, ("fp16", "fp16")),
    }
    rows = {(r["train"], r["rollout"]): r for r in ablation.table(runs, meta_of(runs))}
    pair = rows[("bf16", "fp32")]
    assert pair["seeds"] == 2 and pair["reached 95%"] == "1/2" and pair["steps to 95% (each)"] == "5, —"
    assert pair["final accuracy (mean)"] == 0.75 and pair["s/step rollout"] == 3.0 and pair["s/step update"] == 1.0
    assert pair["rollout dtype (audit)"] == "fp32" and pair["train matmuls (audit)"] == "bf16"
    assert rows[("fp16", "fp16")]["steps to 95% (each)"] == "10"
    assert list(rows) == [("bf16", "fp32"), ("fp16", "fp16")]  # the paper's order


def test_findings_compare_every_pair_with_bf16_and_say_when_the_seeds_cannot_separate_them():
    runs = {
        "grpo-bf16-s0": _rows([0.5] * 8 + [1.0] * 8, 1.0, 1.0, ("bf16", "bf16")),
        "grpo-bf16-s1": _rows([0.5] * 4 + [1.0] * 12, 1.0, 1.0, ("bf16", "bf16")),
        "grpo-bf16-fp32r-s0": _rows([0.5] * 6 + [1.0] * 10, 3.0, 1.0, ("bf16", "fp32")),
        "grpo-fp16-s0": _rows([0.5] * 16, 1.0, 1.0, ("fp16", "fp16")),
        "grpo-fp32-s0": _rows([1.0] * 16, 1.0, 1.0, ("fp32", "fp32")),
    }
    lines = ablation.findings(ablation.table(runs, meta_of(runs)))
    said = {s.split(" vs ")[0]: s for s in lines[:-1]}
    assert set(said) == {"bf16 train / fp32 rollout", "fp16 train / fp16 rollout", "fp32 train / fp32 rollout"}
    assert (
        "step time 2.00×" in said["bf16 train / fp32 rollout"] and "ranges overlap" in said["bf16 train / fp32 rollout"]
    )
    # what the overlap could have shown: bf16/bf16's seeds reached 95 % at steps 9 and 5 (SD 2.83, the only pair
    # with two), so (t(0.975, 2) + z(0.8)) x 2.83 x sqrt(2/2) = (4.30 + 0.84) x 2.83 = 14.6 steps
    assert lines[-1].startswith("What an overlap can rule out:") and "pooled seed SD of 2.83 steps" in lines[-1]
    assert "80% power only from 14.6 steps up" in lines[-1]
    assert "no seed reached it" in said["fp16 train / fp16 rollout"]
    assert "ranges separated" in said["fp32 train / fp32 rollout"]  # 5 against 9-13
    with pytest.raises(ValueError, match="reference pair"):
        ablation.findings(ablation.table(runs, meta_of(runs)), reference=("fp8", "fp8"))


def test_the_findings_read_named_fields_so_a_header_can_change_without_touching_them(monkeypatch):
    runs = {
        "grpo-bf16-s0": _rows([0.5] * 8 + [1.0] * 8, 1.0, 1.0, ("bf16", "bf16")),
        "grpo-bf16-s1": _rows([0.5] * 4 + [1.0] * 12, 1.0, 1.0, ("bf16", "bf16")),
        "grpo-bf16-fp32r-s0": _rows([0.5] * 6 + [1.0] * 10, 3.0, 1.0, ("bf16", "fp32")),
    }
    lines = ablation.findings(ablation.table(runs, meta_of(runs)))
    monkeypatch.setattr(ablation, "COLUMNS", {k: f"<{v}>" for k, v in ablation.COLUMNS.items()})
    rows = ablation.table(runs, meta_of(runs))
    assert "<steps to 95% (each)>" in rows[0] and "<s/step total>" in rows[0]
    assert ablation.findings(rows) == lines
