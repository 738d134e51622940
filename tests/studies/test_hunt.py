"""The hunt (notebook 04): its grid, its labels, the phase map's gap, the verdict, and a resumable grid run."""

from __future__ import annotations

import pytest

from nbkit.studies import hunt


def _rows(acc: list[float], mismatch: float = 1e-4, growth: float = 1.0, alarm_at: int | None = None) -> list[dict]:
    n = len(acc)
    out = []
    for i, a in enumerate(acc):
        row = {
            "step": i + 1,
            "accuracy": a,
            "mismatch/token_abs_logp_diff/mean": mismatch * (1 + (growth - 1) * i / max(n - 1, 1)),
        }
        if alarm_at == i + 1:
            row["alarm"] = "reward fell"
        out.append(row)
    return out


def _grid(bf16_final: dict[int, float], fp16_final: float = 0.8, cell=("long", 1e-3, "grpo_mu_old")) -> dict:
    length, lr, algorithm = cell
    runs = {}
    for seed, bf in bf16_final.items():
        runs[hunt.label(length, lr, algorithm, "fp16", seed)] = _rows([0.6] * 5 + [fp16_final] * 5, mismatch=1e-4)
        runs[hunt.label(length, lr, algorithm, "bf16", seed)] = _rows([0.6] * 5 + [bf] * 5, mismatch=8e-4, growth=3.0)
    return runs


def pm(runs: dict, **kwargs) -> list[dict]:
    """The phase map of ``runs`` with their coordinates."""
    return hunt.phase_map(runs, meta_of(runs), **kwargs)


def meta_of(runs: dict) -> dict:
    """Coordinates as ``Hunt.coords`` reads them from each run's config (here: the configs the grid would make)."""
    study = hunt.Hunt()
    out = {}
    for name in runs:
        length, lr, algorithm, dtype, seed = name.split("-")
        cfg = hunt.configs(
            hunt.HuntConfig(lengths=(length,), lrs=(float(lr[2:]),), algorithms=(algorithm,), seeds=(int(seed[1:]),))
        )[name]
        out[name] = study.coords(cfg.to_dict())
    return out


def test_the_default_grid_meets_the_issue_minimum():
    hc = hunt.HuntConfig()
    assert len(hc.lengths) >= 3 and len(hc.lrs) >= 2 and len(hc.seeds) >= 3
    assert {"grpo", "pg_seq_is", "grpo_mu_old"} <= set(hc.algorithms) and {"fp16", "bf16"} <= set(hc.dtypes)
    cfgs = hunt.configs(hc)
    assert len(cfgs) == len(hc.lengths) * len(hc.lrs) * 3 * 2 * 3


def test_every_bf16_run_has_an_fp16_twin_with_everything_else_equal():
    cfgs = hunt.configs(hunt.HuntConfig())
    for _name, cfg in cfgs.items():
        p = hunt.Hunt().coords(cfg.to_dict())
        if p["dtype"] != "bf16":
            continue
        twin = cfgs[hunt.label(p["length"], p["lr"], p["algorithm"], "fp16", p["seed"])]
        a, b = cfg.to_dict(), twin.to_dict()
        differ = {k for k in a if a[k] != b[k]}
        assert differ == {"train_dtype", "output_dir"}, differ
        assert cfg.train_dtype == "bf16" and twin.train_dtype == "fp16" and cfg.rollout_dtype in (None, "bf16")


def test_a_runs_coordinates_come_from_its_config_and_a_foreign_run_is_refused():
    cfg = hunt.configs(hunt.HuntConfig(lengths=("medium",), lrs=(1e-4,), algorithms=("pg_seq_is",), seeds=(2,)))
    name = hunt.label("medium", 1e-4, "pg_seq_is", "bf16", 2)
    assert hunt.Hunt().coords(cfg[name].to_dict()) == {
        "length": "medium",
        "lr": 1e-4,
        "algorithm": "pg_seq_is",
        "dtype": "bf16",
        "seed": 2,
    }
    renamed = cfg[name].to_dict() | {"output_dir": "runs/whatever-name"}  # the folder name plays no part
    assert hunt.Hunt().coords(renamed) == hunt.Hunt().coords(cfg[name].to_dict())
    with pytest.raises(ValueError, match="not a hunt run"):
        hunt.Hunt().coords(cfg[name].to_dict() | {"dataset": "data/tiny_arith_sanity"})


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"lengths": ("huge",)}, "huge"),
        ({"algorithms": ("ppo2",)}, "ppo2"),
        ({"dtypes": ("bf16",)}, "fp16 and bf16"),
        ({"dtypes": ("fp16", "bf16", "fp8")}, "fp8"),
        ({"lrs": (0.0,)}, "positive"),
        ({"seeds": ()}, "seeds"),
        ({"steps": 0}, "steps"),
    ],
)
def test_bad_grid_settings_name_the_value_and_the_choices(kwargs, named):
    with pytest.raises(ValueError, match=named):
        hunt.HuntConfig(**kwargs)


def test_a_gap_counts_only_when_every_seed_agrees_and_it_exceeds_the_margin():
    behind = pm(_grid({0: 0.5, 1: 0.55, 2: 0.6}))
    assert len(behind) == 1 and behind[0]["gap sign"] == "BF16 behind"
    assert behind[0]["gap (bf16 − fp16)"] == pytest.approx(-0.25)
    assert behind[0]["mismatch bf16/fp16"] == pytest.approx(16.0)  # 8x at the start, growing 3x over the run
    # last 5 steps over first 5 of a ramp 1 → 3 over 10 steps: (1 + 14/9) / (1 + 4/9)
    assert behind[0]["bf16 mismatch growth"] == pytest.approx(23 / 13, rel=1e-3) and behind[0][
        "fp16 mismatch growth"
    ] == pytest.approx(1.0)
    mixed = pm(_grid({0: 0.5, 1: 0.9, 2: 0.6}))  # one seed has BF16 ahead: not separated
    assert mixed[0]["gap sign"] == "within seed spread"
    small = pm(_grid({0: 0.78, 1: 0.79, 2: 0.77}))  # every seed behind, but by less than the margin
    assert small[0]["gap sign"] == "within seed spread"
    ahead = pm(_grid({0: 0.95, 1: 0.9, 2: 0.92}))
    assert ahead[0]["gap sign"] == "BF16 ahead"


def test_the_verdict_names_the_cells_where_bf16_fell_behind_or_says_it_did_not():
    runs = {**_grid({0: 0.5, 1: 0.55, 2: 0.6}), **_grid({0: 0.8, 1: 0.8, 2: 0.8}, cell=("short", 1e-4, "grpo"))}
    rows = pm(runs)
    text = hunt.verdict(rows)
    assert "in 1: long responses, lr 0.001, grpo_mu_old (-0.250)" in text
    assert "not run: long responses, lr 0.0001, grpo;" in text  # the cross's cells the map lacks are named
    assert "not run" not in hunt.verdict(pm(_grid({0: 0.8, 1: 0.81, 2: 0.79})))
    assert hunt.most_telling(rows)["length"] == "long"
    lonely = {k: v for k, v in _grid({0: 0.8}, cell=("medium", 1e-4, "grpo")).items() if "-bf16-" in k}
    with_lonely = hunt.verdict(pm({**runs, **lonely}))
    assert "Left out, no FP16/BF16 twin: medium responses, lr 0.0001, grpo." in with_lonely
    assert pm(lonely)[0]["gap sign"] == "no FP16/BF16 twin"
    with pytest.raises(ValueError, match="no phase-map cell has an FP16 and a BF16 run"):
        hunt.verdict(pm(lonely))
    calm = hunt.verdict(pm(_grid({0: 0.8, 1: 0.81, 2: 0.79})))
    assert "never ended behind" in calm and "16.0–16.0×" in calm


def test_the_sentences_read_named_fields_so_a_header_can_change_without_touching_them(monkeypatch):
    """The table is shown under ``COLUMNS``' headers; the verdict and the worst cell are read by named field."""
    runs = {**_grid({0: 0.5, 1: 0.55, 2: 0.6}), **_grid({0: 0.8, 1: 0.81, 2: 0.79}, cell=("short", 1e-4, "grpo"))}
    texts = [hunt.verdict(pm(runs)), hunt.verdict(pm(_grid({0: 0.8, 1: 0.81, 2: 0.79})))]
    renamed = {k: f"<{v}>" for k, v in hunt.COLUMNS.items()}
    monkeypatch.setattr(hunt, "COLUMNS", renamed)
    rows = pm(runs)
    assert "<gap (bf16 − fp16)>" in rows[0] and "gap (bf16 − fp16)" not in rows[0]
    assert [hunt.verdict(rows), hunt.verdict(pm(_grid({0: 0.8, 1: 0.81, 2: 0.79})))] == texts
    assert hunt.most_telling(rows, "<gap (bf16 − fp16)>")["<length>"] == "long"


def test_alarms_and_steps_to_target_are_counted_per_precision():
    runs = _grid({0: 0.5, 1: 0.55, 2: 0.6}, fp16_final=0.97)
    runs[hunt.label("long", 1e-3, "grpo_mu_old", "bf16", 0)] = _rows([0.6] * 5 + [0.5] * 5, alarm_at=9)
    row = pm(runs)[0]
    assert row["bf16 alarms"] == 1 and row["fp16 alarms"] == 0
    assert row["fp16 steps to 95%"] == "10, 10, 10" and row["bf16 steps to 95%"] == "—, —, —"


def test_the_phase_map_figure_has_one_row_per_length():
    from nbkit.plots import hunt as hunt_plots

    runs = {**_grid({0: 0.5, 1: 0.55, 2: 0.6}), **_grid({0: 0.8, 1: 0.8, 2: 0.8}, cell=("short", 1e-4, "grpo"))}
    fig = hunt_plots.phase_map(pm(runs))
    assert list(fig.data[0].y) == ["short", "long"] and len(fig.data[0].x) == 2
    cell = hunt.most_telling(pm(runs))
    assert len(hunt.cell_runs(runs, meta_of(runs), cell)) == 6  # 2 precisions x 3 seeds of the long cell only
    curves = hunt_plots.cell_curves(hunt.cell_runs(runs, meta_of(runs), cell), meta_of(runs), cell)
    assert {t.name for t in curves.data} == {"bf16 (mean of 3 seeds)", "fp16 (mean of 3 seeds)"}


def test_a_grid_runs_both_twins_on_tiny_long_and_a_finished_cell_is_not_rerun(tmp_path):
    opts = dict(
        lengths=["short"],
        lrs=[1e-4],
        algorithms=["grpo_mu_old"],
        seeds=[0],
        steps=1,
        prompts_per_step=2,
        samples_per_prompt=2,
        output_dir=str(tmp_path / "hunt"),
    )
    runs, meta, _ = hunt.Hunt().live(progress=False, **opts)
    assert sorted(runs) == ["short-lr0.0001-grpo_mu_old-bf16-s0", "short-lr0.0001-grpo_mu_old-fp16-s0"]
    for name, rows in runs.items():
        dtype = meta[name]["dtype"]
        assert rows[-1]["step"] == 1 and rows[-1]["audit/rollout_dtype"] == dtype
        assert dtype in rows[-1]["audit/matmul_dtypes"]
        assert rows[-1]["completions/mean_length"] > 90  # the short regime's ~100-token chains
    logs = {p: p.stat().st_mtime_ns for p in (tmp_path / "hunt").glob("*/metrics.jsonl")}
    again = hunt.Hunt().run(progress=False, **opts)
    assert again == runs and {p: p.stat().st_mtime_ns for p in logs} == logs


def test_a_run_collapsed_when_its_final_accuracy_ends_far_below_its_first_step_even_without_an_alarm():
    """At lr 1e-3 the 16-step runs fall from ~0.7 to 0 in both precisions while the 10-step-window alarm stays
    silent; the map counts those runs as collapsed, per precision, and the verdict names the cell."""
    runs = _grid({0: 0.8, 1: 0.8, 2: 0.8})
    runs[hunt.label("long", 1e-3, "grpo_mu_old", "bf16", 1)] = _rows([0.7] + [0.1] * 9)  # 0.1 < 0.7 - 0.3
    runs[hunt.label("long", 1e-3, "grpo_mu_old", "fp16", 2)] = _rows([0.7] + [0.45] * 9)  # 0.45 ≥ 0.4: held
    row = pm(runs)[0]
    assert (row["bf16 collapsed"], row["fp16 collapsed"]) == (1, 0)
    assert row["bf16 alarms"] == 0
    text = hunt.verdict([row])
    assert "FP16 0, BF16 1 (in long responses, lr 0.001, grpo_mu_old)" in text


def test_the_store_keeps_finished_runs_only_and_its_card_names_the_rest(tmp_path):
    import json

    opts = dict(
        lengths=["short"], lrs=[1e-4], algorithms=["grpo"], seeds=[0], steps=3, output_dir=str(tmp_path / "hunt")
    )
    study = hunt.Hunt()
    grid = study.grid(**opts)
    done, cut = (hunt.label("short", 1e-4, "grpo", d, 0) for d in ("fp16", "bf16"))
    for name, n in ((done, 3), (cut, 1)):  # bf16 was cut off after its first step
        folder = tmp_path / "hunt" / name
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows([0.5] * n)))
        (folder / "config.json").write_text(json.dumps(grid[name].to_dict()))
    study.store(wall_seconds=1.0, command="test", root=tmp_path / "results", **opts)
    assert list(study.load(tmp_path / "results")) == [done]
    assert cut in study.card(tmp_path / "results")["notes"]
    assert study.stored_meta(tmp_path / "results") == {
        done: {"length": "short", "lr": 1e-4, "algorithm": "grpo", "dtype": "fp16", "seed": 0}
    }
    for name in (done, cut):
        (tmp_path / "hunt" / name / "metrics.jsonl").unlink()
    with pytest.raises(ValueError, match="no finished run"):
        study.store(wall_seconds=1.0, command="test", root=tmp_path / "results", **opts)


def test_shards_partition_the_grid_and_each_gets_both_precisions():
    study = hunt.Hunt()
    grid = study.grid()
    shards = [[k for j, k in enumerate(grid) if study.shard_of(j, 2) == i] for i in (0, 1)]
    assert sorted(shards[0] + shards[1]) == sorted(grid) and not set(shards[0]) & set(shards[1])
    for shard in shards:
        counts = {d: sum(study.coords(grid[k].to_dict())["dtype"] == d for k in shard) for d in ("fp16", "bf16")}
        assert counts["fp16"] == counts["bf16"] == len(grid) // 4
