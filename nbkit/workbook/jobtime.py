"""How long the main job takes on this CPU: an estimate printed before it starts, the measured time table after.

The estimate is not a promise. It takes the per-notebook wall times of a main job measured on some CPU (stored in
``data/timings/main_job.json``, one record per measured run, each naming its CPU, flags, commit and date) and scales
them by how fast this CPU runs a short calibration workload — a few forward + backward passes of ``tiny-arith`` in
FP32 and in BF16 under ``gemm="auto"`` (the policy the notebooks run), timed here against the stored run's own
calibration. A record from a CPU with the same GEMM policy (``native`` vs ``fp32-accumulate``) is preferred; when
there is none the estimate says it extrapolates across kernel families.

    nbkit jobtime                      # the estimate for this CPU and profile cpu (``nbkit.cli.jobtime``)
    nbkit jobtime record reports       # append a finished report's measured times to the stored records
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbkit import results
from nbkit.runtime.paths import DATA, ROOT

TIMINGS = DATA / "timings" / "main_job.json"
"""Stored measurements of the main job: a JSON list of records (see ``record``)."""


def calibrate(passes: int = 7, batch: int = 16, length: int = 48) -> dict:
    """Seconds per forward + backward pass of tiny-arith on ``batch × length`` tokens, in FP32 and in BF16 under
    ``gemm="auto"`` (the fastest of ``passes`` after one warm-up: the CPU's speed, not a passing load spike), and
    their sum (``seconds``): the speed of this CPU on the work the main job mostly does (about a second)."""
    import torch

    from nbkit.models import models
    from nbkit.precision import gemm

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
    m = results.machine()
    return {k: m[k] for k in ("cpu", "cores", "cpu_flags", "gemm_auto", "kernel_caps")}


def describe_cpu(here: dict) -> str:
    """One line naming a CPU record (``cpu()``, or a stored record): model, flags, policy, and any emulation."""
    caps = here.get("kernel_caps") or {}
    return (
        f"{here['cpu']} ({', '.join(here['cpu_flags']) or 'no half flags'}; gemm auto = {here['gemm_auto']}"
        + (f"; kernels capped by {', '.join(f'{k}={v}' for k, v in caps.items())}: an emulation" if caps else "")
        + ")"
    )


def cpu_header() -> str:
    """The line every benchmark prints first: this CPU (``describe_cpu``), its cores, torch's threads and the load
    average, so that a measurement always says what it ran on and how busy the cores were."""
    import os

    import torch

    here = cpu()
    return (
        f"CPU: {describe_cpu(here)}, {here['cores']} cores; torch threads {torch.get_num_threads()}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


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
    learned: dict[str, str] = field(default_factory=dict)
    """Notebook → where its estimate was learned on a CPU of this very kind (``same_cpu``): ``"own"`` (that CPU's
    measured time, scaled by the calibration ratio) or ``"ratio"`` (the reference's time × that CPU's measured /
    estimated of its last report); notebooks left out are the plain calibration-scaled reference."""
    own: dict | None = None
    """The newest record made on a CPU of this kind (None: no report has run on one yet)."""
    rewritten: list[str] = field(default_factory=list)
    """Notebooks whose code changed since the record their time comes from (``code_fingerprint``): that time is the
    old notebook's (e.g. before its parts ran beside each other)."""

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def describe(self) -> str:
        r = self.reference
        line = (
            f"estimate ~{self.total / 60:.0f} min: the notebooks' times measured on {describe_cpu(r)} at "
            f"{r['commit']} on {r['date']}, scaled x{self.scale:.2f} by this CPU's calibration"
        )
        if not self.same_policy:
            line += (
                " -- that CPU ran another GEMM policy than this one: an extrapolation across kernel families, "
                "expect a larger error"
            )
        if self.unknown:
            line += f"; no reference time for {self.unknown}"
        if self.changed:
            line += f"; parameters changed since for {self.changed} (their times are the old parameters')"
        if self.rewritten:
            line += f"; notebook code changed since for {self.rewritten} (their times are the old notebooks')"
        own = [s for s, how in self.learned.items() if how == "own"]
        ratio = [s for s, how in self.learned.items() if how == "ratio"]
        if own:
            line += (
                f"; learned on this kind of CPU: {len(own)} notebook(s) from its own report at "
                f"{self.own['commit']} on {self.own['date']}"
            )
        if ratio:
            line += f"; {len(ratio)} corrected by the measured / estimated ratios of that report"
        return line


def code_fingerprint(stem: str, commit: str | None = None) -> str | None:
    """A notebook's code: the first 12 hex digits of the SHA-256 of its code cells other than the parameters cell,
    read from the working tree, or from git at ``commit``; None where it cannot be read."""
    import hashlib
    import subprocess

    path = ROOT / "notebooks" / f"{stem}.ipynb"
    try:
        if commit is None:
            text = path.read_text()
        else:
            text = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{commit}:notebooks/{stem}.ipynb"],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout
        cells = json.loads(text)["cells"]
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        return None
    code = [
        "".join(c["source"])
        for c in cells
        if c.get("cell_type") == "code" and "parameters" not in c.get("metadata", {}).get("tags", [])
    ]
    return hashlib.sha256(json.dumps(code).encode()).hexdigest()[:12]


def _recorded_code(rec: dict, stem: str) -> str | None:
    """The code fingerprint of ``stem`` when ``rec`` was measured: stored with it, else read from git at its
    commit (records made before fingerprints were kept)."""
    if stem in (rec.get("code") or {}):
        return rec["code"][stem]
    return code_fingerprint(stem, rec["commit"]) if rec.get("commit") else None


def _same_code(rec: dict, stem: str, code: dict[str, str | None] | None) -> bool:
    """Whether ``stem``'s code now (``code``) is the code ``rec`` measured (True where either is unknown)."""
    if code is None or code.get(stem) is None:
        return True
    then = _recorded_code(rec, stem)
    return then is None or then == code[stem]


def estimate(
    stems: list[str],
    profile: str,
    calibration: dict,
    here: dict,
    stored: list[dict] | None = None,
    parameters: dict[str, dict] | None = None,
    effective: dict[str, dict] | None = None,
    code: dict[str, str | None] | None = None,
) -> Estimate | None:
    """The estimate for ``stems`` of ``profile`` on this CPU (``here``: ``cpu()``) from the newest stored record of
    that profile, preferring one made under the same GEMM policy, and among those one made on a CPU running its
    own kernels over an emulation; None when no record of the profile exists.
    ``parameters`` (stem → what papermill injects) names the notebooks whose parameters changed since the record;
    ``effective`` (stem → the notebook's defaults with those injected, ``runner.effective_parameters``) also catches
    a changed default, against a record that kept its own. ``code`` (stem → ``code_fingerprint``; None: this
    checkout's) names the notebooks rewritten since the record their time comes from (``Estimate.rewritten``: that
    time is the old notebook's, e.g. before its parts ran beside each other)."""
    if code is None:
        code = {s: code_fingerprint(s) for s in stems}
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
    est = Estimate(seconds, scale, ref, bool(same), [s for s in stems if s not in ref["notebooks"]], changed)
    est = learn(est, pool, calibration, here, parameters, effective)
    est.rewritten = [s for s in est.seconds if not _same_code(est.own if est.learned.get(s) == "own" else ref, s, code)]
    return est


def same_cpu(a: dict, b: dict) -> bool:
    """Whether two CPU records (``cpu()``, stored records) are one kind of CPU: the same model name, half-precision
    flags, GEMM policy and kernel caps (an emulation is its own kind)."""
    return (
        a.get("cpu") is not None
        and all(a.get(k) == b.get(k) for k in ("cpu", "cpu_flags", "gemm_auto"))
        and (a.get("kernel_caps") or {}) == (b.get("kernel_caps") or {})
    )


def learn(
    est: Estimate,
    pool: list[dict],
    calibration: dict,
    here: dict,
    parameters: dict[str, dict] | None = None,
    effective: dict[str, dict] | None = None,
) -> Estimate:
    """The estimate corrected by what the reports made on this kind of CPU (``same_cpu``) measured; per notebook:

    1. ``own``: the newest such report ran this notebook with today's parameters — its measured time as it is
       (a notebook rewritten since is named in ``Estimate.rewritten``: its time is the old notebook's).
       The few-second calibration is for another CPU's times: on this CPU's own it only adds its noise (measured:
       a second report on the AMD EPYC family 26 was calibrated 1.13× slower than the first, and its unchanged
       notebooks then ran at 0.97–1.03× the first's times);
    2. ``ratio``: it ran the notebook with other parameters but kept the estimate printed before it, and the
       reference is another CPU's — the reference's calibration-scaled time × that report's measured / estimated
       (what the calibration missed about this CPU, e.g. its caches and memory, or an emulation's clock);
    3. otherwise the reference's calibration-scaled time, as before.
    A CPU's second report is thus estimated from its first, not from another CPU's."""
    mine = [r for r in pool if same_cpu(r, here)]
    if not mine:
        return est
    own = max(mine, key=lambda r: r["date"])
    est.own = own
    before, now = own.get("parameters", {}), parameters
    if effective is not None and own.get("effective_parameters"):
        before, now = own["effective_parameters"], effective
    guessed = own.get("estimated") or {}
    for stem in list(est.seconds) + est.unknown:
        same_params = now is None or (stem in before and before[stem] == now.get(stem))
        if stem in own["notebooks"] and same_params:
            est.seconds[stem], est.learned[stem] = own["notebooks"][stem], "own"
        elif (
            stem in est.seconds and guessed.get(stem) and stem in own["notebooks"] and not same_cpu(est.reference, here)
        ):  # the reference is another CPU's: correct it once
            est.seconds[stem] *= own["notebooks"][stem] / guessed[stem]
            est.learned[stem] = "ratio"
    est.unknown = [s for s in est.unknown if s not in est.seconds]
    return est


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
    rec = {
        "profile": prov["profile"],
        **run["cpu"],
        "calibration": run["calibration"],
        "commit": prov["commit"],
        "date": prov["date"],
        "fresh_clone": fresh_clone,
        "note": note,
        "notebooks": {n["stem"]: round(n["seconds"], 1) for n in run["notebooks"]},
        "parameters": {n["stem"]: n["parameters"] for n in run["notebooks"]},
    }
    code = {n["stem"]: code_fingerprint(n["stem"]) for n in run["notebooks"]}  # the checkout that made the report
    if any(code.values()):
        rec["code"] = {k: v for k, v in code.items() if v}
    if all("defaults" in n for n in run["notebooks"]):  # reports made since the runner kept the notebooks' defaults
        rec["effective_parameters"] = {n["stem"]: {**n["defaults"], **n["parameters"]} for n in run["notebooks"]}
    if run.get("estimate"):  # what was printed before it ran: the next estimate on this kind of CPU learns from it
        rec["estimated"] = {k: round(v, 1) for k, v in run["estimate"].items()}
        rec["measured_over_estimated"] = {
            k: round(rec["notebooks"][k] / v, 3) for k, v in run["estimate"].items() if k in rec["notebooks"] and v
        }
    rows = records(path)
    rows.append(rec)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rows, indent=1) + "\n")
    return rec
