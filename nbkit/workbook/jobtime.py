"""How long the main job takes on this CPU: an estimate printed before it starts, the measured time table after.

The estimate is not a promise. It takes the per-notebook wall times of a main job measured on some CPU (stored in
``data/timings/main_job.json``, one record per measured run, each naming its CPU, flags, commit and date) and scales
them by how fast this CPU runs a short calibration workload — a few forward + backward passes of ``tiny-arith`` in
FP32 and in BF16 under ``gemm="auto"`` (the policy the notebooks run), timed here against the stored run's own
calibration. A record from a CPU with the same GEMM policy (``native`` vs ``fp32-accumulate``) is preferred; when
there is none the estimate says it extrapolates across kernel families.

    python -m nbkit.workbook.jobtime                      # the estimate for this CPU and profile cpu
    python -m nbkit.workbook.jobtime record reports       # append a finished report's measured times to the stored records
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbkit.paths import DATA

TIMINGS = DATA / "timings" / "main_job.json"
"""Stored measurements of the main job: a JSON list of records (see ``record``)."""


def calibrate(passes: int = 7, batch: int = 16, length: int = 48) -> dict:
    """Seconds per forward + backward pass of tiny-arith on ``batch × length`` tokens, in FP32 and in BF16 under
    ``gemm="auto"`` (the fastest of ``passes`` after one warm-up: the CPU's speed, not a passing load spike), and
    their sum (``seconds``): the speed of this CPU on the work the main job mostly does (about a second)."""
    import torch

    from nbkit import gemm, models

    model, _ = models.load("tiny-arith", "fp32")
    ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))
    out = {"policy": gemm.resolve("auto")}
    for dtype in ("fp32", "bf16"):
        m = model.to(models.torch_dtype(dtype))
        times = []
        for i in range(passes + 1):
            start = time.perf_counter()
            with gemm.policy("auto") if dtype != "fp32" else contextlib.nullcontext():
                loss = m(input_ids=ids, labels=ids).loss
                loss.backward()
            m.zero_grad(set_to_none=True)
            if i:
                times.append(time.perf_counter() - start)
        out[dtype] = round(min(times), 4)
    out["seconds"] = round(out["fp32"] + out["bf16"], 4)
    return out


def cpu() -> dict:
    """This CPU: model name, cores, the half-precision flags, the GEMM policy ``auto`` picks and the kernel caps in
    force (non-empty when an ISA is emulated, e.g. AVX2 on an AVX512 CPU by ``benchmarks/avx2.py``)."""
    from nbkit import results

    m = results.machine()
    return {k: m[k] for k in ("cpu", "cores", "cpu_flags", "gemm_auto", "kernel_caps")}


def describe_cpu(here: dict) -> str:
    """One line naming a CPU record (``cpu()``, or a stored record): model, flags, policy, and any emulation."""
    caps = here.get("kernel_caps") or {}
    return (f"{here['cpu']} ({', '.join(here['cpu_flags']) or 'no half flags'}; gemm auto = {here['gemm_auto']}"
            + (f"; kernels capped by {', '.join(f'{k}={v}' for k, v in caps.items())}: an emulation" if caps else "")
            + ")")


def cpu_header() -> str:
    """The line every benchmark prints first: this CPU (``describe_cpu``), its cores, torch's threads and the load
    average, so that a measurement always says what it ran on and how busy the cores were."""
    import os

    import torch

    here = cpu()
    return (f"CPU: {describe_cpu(here)}, {here['cores']} cores; torch threads {torch.get_num_threads()}; "
            f"load average {os.getloadavg()[0]:.2f}")


def records(path: Path = TIMINGS) -> list[dict]:
    """The stored main-job measurements ([] when none)."""
    return json.loads(Path(path).read_text()) if Path(path).is_file() else []


@dataclass
class Estimate:
    """The predicted wall time of a profile's notebooks on this CPU, and where it came from."""

    seconds: dict[str, float]
    """Notebook stem → predicted seconds (notebooks the reference did not run are left out)."""
    scale: float
    """This CPU's calibration seconds over the reference's."""
    reference: dict
    """The stored record scaled (its CPU, flags, commit, date)."""
    same_policy: bool
    """Whether the reference CPU ran the same GEMM policy (``auto``) as this one."""
    unknown: list[str]
    """Notebooks of this run that the reference has no time for."""
    changed: list[str] = field(default_factory=list)
    """Notebooks whose parameters differ from the reference run's (their estimate is for the old parameters)."""

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def describe(self) -> str:
        r = self.reference
        line = (f"estimate ~{self.total / 60:.0f} min: the notebooks' times measured on {describe_cpu(r)} at "
                f"{r['commit']} on {r['date']}, scaled x{self.scale:.2f} by this CPU's calibration")
        if not self.same_policy:
            line += (" -- that CPU ran another GEMM policy than this one: an extrapolation across kernel families, "
                     "expect a larger error")
        if self.unknown:
            line += f"; no reference time for {self.unknown}"
        if self.changed:
            line += f"; parameters changed since for {self.changed} (their times are the old parameters')"
        return line


def estimate(stems: list[str], profile: str, calibration: dict, here: dict,
             stored: list[dict] | None = None, parameters: dict[str, dict] | None = None,
             effective: dict[str, dict] | None = None) -> Estimate | None:
    """The estimate for ``stems`` of ``profile`` on this CPU (``here``: ``cpu()``) from the newest stored record of
    that profile, preferring one made under the same GEMM policy, and among those one made on a CPU running its
    own kernels over an emulation; None when no record of the profile exists.
    ``parameters`` (stem → what papermill injects) names the notebooks whose parameters changed since the record;
    ``effective`` (stem → the notebook's defaults with those injected, ``runner.effective_parameters``) also catches
    a changed default, against a record that kept its own."""
    pool = [r for r in (records() if stored is None else stored) if r["profile"] == profile]
    if not pool:
        return None
    same = [r for r in pool if r["gemm_auto"] == here["gemm_auto"]]
    ref = max(same or pool, key=lambda r: (not r.get("kernel_caps"), r["date"]))
    scale = calibration["seconds"] / ref["calibration"]["seconds"]
    seconds = {s: ref["notebooks"][s] * scale for s in stems if s in ref["notebooks"]}
    before, now = ref.get("parameters", {}), parameters
    if effective is not None and ref.get("effective_parameters"):
        before, now = ref["effective_parameters"], effective
    changed = [s for s in stems if now is not None and s in before and before[s] != now.get(s)]
    return Estimate(seconds, scale, ref, bool(same), [s for s in stems if s not in ref["notebooks"]], changed)


def record(report_dir: Path, *, fresh_clone: bool, note: str = "", path: Path = TIMINGS) -> dict:
    """Append the measured times of a finished report (its ``run.json``) to the stored records and return the
    record: profile, CPU, flags, GEMM policy, calibration, per-notebook seconds, commit, date, note."""
    run = json.loads((Path(report_dir) / "run.json").read_text())
    prov = run["provenance"]
    failed = [n["stem"] for n in run["notebooks"] if not n["ok"]]
    if failed:
        raise ValueError(f"{report_dir}: notebooks {failed} failed; only a complete run is a reference")
    if "calibration" not in run:
        raise ValueError(f"{report_dir}/run.json has no calibration (made before nbkit.workbook.jobtime existed)")
    rec = {"profile": prov["profile"], **run["cpu"], "calibration": run["calibration"], "commit": prov["commit"],
           "date": prov["date"], "fresh_clone": fresh_clone, "note": note,
           "notebooks": {n["stem"]: round(n["seconds"], 1) for n in run["notebooks"]},
           "parameters": {n["stem"]: n["parameters"] for n in run["notebooks"]}}
    if all("defaults" in n for n in run["notebooks"]):  # reports made since the runner kept the notebooks' defaults
        rec["effective_parameters"] = {n["stem"]: {**n["defaults"], **n["parameters"]} for n in run["notebooks"]}
    rows = records(path)
    rows.append(rec)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rows, indent=1) + "\n")
    return rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nbkit.workbook.jobtime", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    e = sub.add_parser("estimate", help="the estimate for this CPU (the default)")
    e.add_argument("--profile", default="cpu")
    r = sub.add_parser("record", help="append a finished report's times to data/timings/main_job.json")
    r.add_argument("report_dir")
    r.add_argument("--fresh-clone", action="store_true", help="the report came from a fresh clone (cold caches)")
    r.add_argument("--note", default="", help="e.g. the load the machine was under")
    a = p.parse_args(argv)
    if a.cmd == "record":
        print(json.dumps(record(Path(a.report_dir), fresh_clone=a.fresh_clone, note=a.note), indent=1))
        return 0
    from nbkit.workbook import runner  # its notebooks, in its order, with its parameters

    profile = getattr(a, "profile", "cpu")
    stems = [n.stem for n in runner.notebooks()]
    try:
        parameters = {s: runner.parameters_for(profile, s) for s in stems}
    except ValueError as exc:  # an unknown profile, named with the choices
        p.error(str(exc))
    effective = {n.stem: runner.effective_parameters(n, parameters[n.stem]) for n in runner.notebooks()}
    est = estimate(stems, profile, calibrate(), cpu(), parameters=parameters, effective=effective)
    print(est.describe() if est else f"no stored measurement of profile {profile!r} in {TIMINGS}: no estimate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
