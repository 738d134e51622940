"""The way a run's config takes through the code, from ``nbkit.rl.run.train`` to the first optimiser step.

    .venv/bin/python benchmarks/run_walk.py     # one 1-step tiny-arith run (fp32, HF engine), ~40 s on 2 cores

Traces the calls (``sys.setprofile``) of one tiny run and prints:
- ``train`` itself: the modules of the functions ``train`` calls directly, in order (a module called twice in a
  row counts once), how many distinct ones, and how many of those visits go to a run-folder module (ownership,
  lock, plan, checkpoints, metrics log, collapse alarm: ``RUN_FOLDER``);
- the config's walk: every library function called with the ``RLConfig`` (or an object holding it as ``cfg``)
  among its arguments, as modules in order: distinct modules, returns to a module it had left, and climbs up a
  layer of ``pyproject.toml``'s import-linter contract (a move into a higher layer).
"""

from __future__ import annotations

import json
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nbkit.runtime import paths  # noqa: E402

paths.setup_environment()

from nbkit.models.toymodels import arith  # noqa: E402
from nbkit.rl import RLConfig, train  # noqa: E402

RUN_FOLDER = {
    "nbkit.rl.runfolder",
    "nbkit.runtime.outputs",
    "nbkit.runtime.locks",
    "nbkit.rl.monitor",
    "nbkit.records.runlog",
}
"""The modules that held a run folder's logic before it was one object (``runfolder.RunFolder``)."""


def layer_rank() -> dict[str, int]:
    """Top-level name under ``nbkit`` -> its layer's height (higher: further from the core)."""
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    return {n.strip(): len(layers) - i for i, layer in enumerate(layers) for n in layer.replace("|", ":").split(":")}


def collapse(calls: list[tuple[str, str]]) -> list[str]:
    """The modules of ``calls`` in order, a module called several times in a row once."""
    return [m for i, (m, _) in enumerate(calls) if i == 0 or calls[i - 1][0] != m]


def trace(cfg: RLConfig) -> tuple[list, list]:
    """(calls train makes directly, calls that carry the config) up to the first step, as (module, function)."""
    direct, carried, state = [], [], {"on": False, "stop": False}

    def profile(frame, event, arg):
        mod = frame.f_globals.get("__name__", "")
        if event != "call" or state["stop"] or not mod.startswith("nbkit"):
            return
        code = frame.f_code
        if mod == "nbkit.rl.trainer" and code.co_name == "on_step_begin":
            state["stop"] = True
            return
        state["on"] = state["on"] or (mod == "nbkit.rl.run" and code.co_name == "train")
        if not state["on"]:
            return
        caller = frame.f_back
        if (
            caller
            and caller.f_globals.get("__name__") == "nbkit.rl.run"
            and caller.f_code.co_name in ("train", "_train")
        ):
            direct.append((mod, code.co_name))
        args = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        if any(isinstance(a, RLConfig) or isinstance(getattr(a, "cfg", None), RLConfig) for a in args):
            carried.append((mod, code.co_name))

    sys.setprofile(profile)
    try:
        train(cfg, progress=False)
    finally:
        sys.setprofile(None)
    return direct, carried


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    data = tmp / "arith.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in arith.make_problems(64, seed=7)))
    cfg = RLConfig(
        model="tiny-arith",
        dataset=str(data),
        train_dtype="fp32",
        rollout_engine="hf",
        max_steps=1,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=8,
        output_dir=str(tmp / "run"),
    )
    direct, carried = trace(cfg)
    rank = layer_rank()
    height = lambda m: rank.get(m.split(".")[1] if "." in m else m, -1)  # noqa: E731
    train_walk, walk = collapse(direct), collapse(carried)
    seen, back, up = set(), 0, 0
    for i, m in enumerate(walk):
        back += m in seen
        up += i > 0 and height(m) > height(walk[i - 1])
        seen.add(m)
    report = {
        "train calls (modules, in order)": train_walk,
        "distinct modules train calls": len(set(train_walk)),
        "visits to run-folder modules": sum(m in RUN_FOLDER for m in train_walk),
        "run-folder modules train calls": sorted(RUN_FOLDER & set(train_walk)),
        "config walk: distinct modules": len(seen),
        "config walk: module visits": len(walk),
        "config walk: returns to a module it had left": back,
        "config walk: climbs up a layer": up,
        "config walk": walk,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
