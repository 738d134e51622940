"""Stored results: studies too long for the main job, kept in the repository so notebooks render without re-running.

A study is a folder ``data/results/<study>/`` holding

- ``runs/<label>.jsonl.gz``: every metric row of one run, gzip-compressed JSON lines (the run's ``metrics.jsonl``);
- ``provenance.json``: the card that says where the numbers came from: git commit (and whether the tree had
  uncommitted changes), the command that produced them, the machine, the date, the wall time, the configs, and the
  ``metrics_version`` its rows were computed under (``nbkit.records.metrics.VERSION``; cards stored before it have
  none),
  and ``sealed``: the sha256 of each run file and of the card itself as ``store`` wrote them (its record of
  amendments aside), so a hand edit is told from a store (``verify``; cards stored before it have none).

``store`` writes a study from run folders (or from rows already in memory); ``load`` reads it back in the shape of
``nbkit.records.runlog.load_runs`` (``label → rows``), so every table and figure helper works on stored and live runs
alike; ``card`` reads the provenance card. A notebook that draws from a stored study says so (``describe``).
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import platform
import subprocess
from pathlib import Path

from nbkit.records import metrics
from nbkit.records.runlog import load_runs
from nbkit.runtime import outputs
from nbkit.runtime.paths import DATA, ROOT

RESULTS = DATA / "results"
"""Where stored studies live."""

CARD = "provenance.json"
"""The provenance card's file name inside a study folder."""

STUDY_FILES = ("runs", CARD)
"""What ``store`` writes into a study folder (what it may replace where a marker predates its ``files`` list)."""


def study_dir(study: str, root: Path = RESULTS) -> Path:
    """The folder of ``study`` (a plain name: letters, digits, ``-``, ``_``, ``.``)."""
    if not study or not all(c.isalnum() or c in "-_." for c in study) or study.startswith("."):
        raise ValueError(f"study name {study!r} must be a plain folder name (letters, digits, '-', '_', '.')")
    return Path(root) / study


def git_state(root: Path = ROOT) -> dict:
    """The commit the working tree is at and whether it has uncommitted changes (None outside a git checkout)."""

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def machine() -> dict:
    """What ran the study: CPU model, cores, RAM, OS, Python, torch and the accelerator if any, with the half
    flags, the GEMM policy ``auto`` picks and any kernel caps in force (``gemm.kernel_caps``: an emulated ISA)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        ram_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        ram_gib = None
    from nbkit.precision import gemm

    return {
        "cpu": cpu,
        "cpu_flags": gemm.half_flags(),
        "gemm_auto": gemm.resolve("auto"),
        "kernel_caps": gemm.kernel_caps(),
        "cores": os.cpu_count(),
        "ram_gib": ram_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def store(
    study: str,
    runs: dict[str, list[dict]] | str | Path,
    *,
    command: str,
    wall_seconds: float | None,
    configs: dict | None = None,
    notes: str = "",
    root: Path = RESULTS,
    earlier: list[dict] | None = None,
    record: dict | None = None,
    keep_old: bool = False,
    ran_on: dict | None = None,
) -> Path:
    """Write ``runs`` (``label → rows``, or a folder of run folders read with ``nbkit.records.runlog.load_runs``) as
    study ``study`` with its provenance card; an existing study of that name is replaced as a whole (its folder
    must hold only what its marker lists: ``outputs.check_replace``; ``GridStudy.store`` decides whether to).

    ``command`` is what a reader runs to reproduce it (e.g. ``make report PROFILE=cpu-full``), ``wall_seconds``
    the study's wall time (None: not measured, and the card says so; never a made-up 0), ``configs`` any JSON-able description of the runs (e.g. ``label → RLConfig.to_dict()``).
    ``earlier``: the parts of a study made in several sittings (``parts`` of the earlier card, each with the runs it trained) whose runs ``runs``
    carries over; the card lists them under ``parts`` with this sitting's, and its wall time is their sum.
    ``record``: fields of the study's record kept on the card as they are (``nbkit.studies.amendments``: the rule,
    the training start and the amendments of a study continued in a later sitting).
    ``keep_old``: the study it replaces is kept beside it as ``<study>.replaced-<date>`` (``replaced_name``).
    ``ran_on``: the machine record of the machine the runs ran on (``machine()`` in the runs, read from their
    folders); None: this process's, for runs that did not record theirs."""
    if not isinstance(runs, dict):
        folder = Path(runs)
        runs = load_runs(folder)
        if not runs:
            raise ValueError(f"no run with metric rows under {folder}: nothing to store")
    if not runs or not all(runs.values()):
        empty = [label for label, rows in runs.items() if not rows]
        raise ValueError(f"every stored run needs metric rows; empty: {empty or 'no runs at all'}")
    if not command.strip():
        raise ValueError("command must say how the study is reproduced")
    out = study_dir(study, root)
    out = outputs.check_replace(out, "results", "stored-results folder", STUDY_FILES)  # before writing anything
    new = outputs.temp_folder_beside(out)
    (new / "runs").mkdir(parents=True)
    for label, rows in runs.items():  # mtime=0: the same rows give the same bytes (a re-store changes no file)
        text = "".join(json.dumps(row, default=_plain) + "\n" for row in rows)
        (new / "runs" / f"{label}.jsonl.gz").write_bytes(gzip.compress(text.encode("utf-8"), 9, mtime=0))
    card = {
        "study": study,
        **git_state(),
        "command": command,
        "machine": ran_on or machine(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "wall_seconds": None if wall_seconds is None else round(float(wall_seconds), 1),
        "runs": sorted(runs),
        "rows": sum(len(r) for r in runs.values()),
        "metrics_version": metrics.VERSION,
        "notes": notes,
        "configs": configs or {},
        **(record or {}),
    }
    if earlier:
        carried = {label for p in earlier for label in p["runs"]}
        card["parts"] = [*earlier, {**parts(card)[0], "runs": sorted(set(runs) - carried)}]
        walls = [p.get("wall_seconds") for p in card["parts"]]
        card["wall_seconds"] = None if None in walls else round(sum(walls), 1)  # unknown when a sitting's is
    card["sealed"] = seal(card, new)
    outputs.write_json(new / CARD, card, indent=1, default=_plain)
    outputs.write_marker(new, "results", study=study, files=True)
    kept = replaced_name(out) if keep_old and (out / CARD).is_file() else None
    outputs.replace_folder(new, out, "results", STUDY_FILES, keep_old=kept)
    if kept is not None:
        print(f"[nbkit] the study it replaced is kept as {kept} (delete it when no longer needed)", flush=True)
    return out


RECORD = ("rule", "training_started", "amendments", "outcomes_read")
"""Card fields added after ``store`` on purpose (``nbkit.studies.amendments``): outside the card's ``sealed`` sum."""


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _card_sum(card: dict) -> str:
    """sha256 of ``card`` as it reads back from its file, without ``sealed`` and its record (``RECORD``)."""
    kept = {k: v for k, v in card.items() if k != "sealed" and k not in RECORD}
    return _sha256(json.dumps(json.loads(json.dumps(kept, default=_plain)), sort_keys=True).encode("utf-8"))


def seal(card: dict, folder: Path) -> dict:
    """``name → sha256`` of every run file ``store`` wrote into ``folder`` and of the ``card`` (``_card_sum``)."""
    sums = {f"runs/{p.name}": _sha256(p.read_bytes()) for p in sorted((Path(folder) / "runs").glob("*.jsonl.gz"))}
    return {CARD: _card_sum(card), **sums}


def verify(study: str, root: Path = RESULTS) -> list[str]:
    """What is wrong with a stored study's files, in phrases naming each ([] when nothing): a run file or the card
    changed after ``store`` wrote them (its ``sealed`` sums; an amendment is no change), and a card whose ``runs``,
    ``rows`` or run configs disagree with its run files."""
    folder = study_dir(study, root)
    c = card(study, root)
    runs = load(study, root)
    problems = []
    sealed = c.get("sealed")
    if isinstance(sealed, dict):
        now = seal(c, folder)
        changed = sorted(n for n in set(sealed) | set(now) if sealed.get(n) != now.get(n))
        if changed:
            problems.append(f"changed after it was stored (sha256 differs from the card's seal): {', '.join(changed)}")
    if sorted(runs) != sorted(c.get("runs") or []):
        problems.append(f"its card lists runs {sorted(c.get('runs') or [])} but runs/ holds {sorted(runs)}")
    rows = sum(len(r) for r in runs.values())
    if c.get("rows") != rows:
        problems.append(f"its card says {c.get('rows')} rows but its runs hold {rows}")
    configs = (c.get("configs") or {}).get("runs")
    if isinstance(configs, dict) and set(configs) != set(runs):
        problems.append(f"its card has configs of {sorted(configs)} but runs/ holds {sorted(runs)}")
    return problems


def wall_text(seconds) -> str:
    """A card's wall time for a page: ``12 min wall``, or that it was not recorded (never a made-up 0)."""
    return "wall time not recorded" if seconds is None else f"{seconds / 60:.0f} min wall"


REPLACED = ".replaced-"
"""In the name of a study kept by ``store(keep_old=True)`` (``<study>.replaced-<date>``): not a stored study of the
catalog, a copy kept until the user deletes it."""


def replaced_name(out: Path) -> Path:
    """Where a replaced study is kept: ``<study>.replaced-<YYYY-MM-DD>`` beside it (``-2``, ``-3``, ... when taken)."""
    base = out.with_name(f"{out.name}{REPLACED}{_dt.date.today().isoformat()}")
    candidate, n = base, 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def parts(card: dict) -> list[dict]:
    """The sittings that made a stored study: its ``parts`` (a study stored in several sittings) or the card itself
    as one part: commit, machine, date, wall time, command and the runs each sitting trained."""
    if card.get("parts"):
        return list(card["parts"])
    return [{k: card.get(k) for k in ("commit", "dirty", "command", "machine", "date", "wall_seconds", "runs")}]


def load(study: str, root: Path = RESULTS) -> dict[str, list[dict]]:
    """``label → rows`` of a stored study (FileNotFoundError naming the studies there when it is missing)."""
    folder = study_dir(study, root)
    if not (folder / CARD).is_file():
        have = sorted(p.name for p in Path(root).glob("*") if (p / CARD).is_file()) if Path(root).is_dir() else []
        raise FileNotFoundError(f"no stored study {study!r} under {root}; stored studies: {have}")
    runs = {}
    for path in sorted((folder / "runs").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            runs[path.name[: -len(".jsonl.gz")]] = [json.loads(line) for line in fh if line.strip()]
    return runs


def card(study: str, root: Path = RESULTS) -> dict:
    """The provenance card of a stored study."""
    path = study_dir(study, root) / CARD
    if not path.is_file():
        raise FileNotFoundError(f"no stored study {study!r} under {root} (no {CARD})")
    return json.loads(path.read_text())


def describe(study: str, root: Path = RESULTS) -> str:
    """One paragraph for a notebook: these numbers are stored, from which commit, machine, date, and how to re-run
    (each sitting of a study stored in several)."""
    c = card(study, root)
    sittings = parts(c)

    def where(p: dict) -> str:
        commit = (p.get("commit") or "unknown")[:10] + (" (with uncommitted changes)" if p.get("dirty") else "")
        return f"at commit {commit} on {machine_text(p.get('machine') or {})} on {p.get('date')}, {wall_text(p.get('wall_seconds'))}"

    made = (
        f"computed {where(sittings[0])}"
        if len(sittings) == 1
        else f"computed in {len(sittings)} sittings: "
        + "; ".join(f"{count(len(p.get('runs') or []), 'run')} {where(p)}" for p in sittings)
    )
    return (
        f"Stored results `data/results/{study}` ({len(c.get('runs', []))} runs): {made}, by `{c.get('command')}`. "
        f"They are not re-computed here; re-run them with that command."
    )


def caps_text(machine: dict | None) -> str:
    """``"; kernels capped: ATEN_CPU_CAPABILITY=avx2, ..."`` for a machine record made under capped kernels (an ISA
    emulation, ``gemm.kernel_caps``), else ``""``: where it ran and what it ran are not the same CPU then."""
    caps = (machine or {}).get("kernel_caps") or {}
    return f"; kernels capped: {', '.join(f'{k}={v}' for k, v in caps.items())}" if caps else ""


def machine_text(m: dict) -> str:
    """A machine record as ``"AMD EPYC (2 cores; avx2, avx512f; kernels capped: ...)"``: its CPU, cores, half-precision
    flags and kernel caps, so two CPUs of one name (an AVX2-only EPYC, an AVX512 one) read apart."""
    flags = m.get("cpu_flags")
    named = (
        f"; {', '.join(flags) or 'no AVX512/AMX half-precision flags'}"
        if flags is not None
        else "; CPU flags not recorded"
    )
    return f"{m.get('cpu')} ({m.get('cores')} cores{named}{caps_text(m)})"


def cpu_header() -> str:
    """The line every benchmark prints first: this machine (``machine_text``), torch's threads and the load average,
    so that a measurement says what it ran on and how busy the cores were."""
    import torch

    return (
        f"CPU: {machine_text(machine())}; torch threads {torch.get_num_threads()}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 run", "3 runs")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _plain(x):
    """JSON for numpy scalars and arrays, paths and anything else with a ``tolist``/``item``."""
    for attr in ("item", "tolist"):
        if hasattr(x, attr):
            return getattr(x, attr)()
    return str(x)
