"""The perfectible dataset: keep the problems the initial model solves sometimes (the paper's sanity test).

The paper samples 40 responses per MATH problem from DeepSeek-R1-Distill-Qwen-1.5B and keeps the problems
whose pass rate lies in [20%, 80%] (1,460 of them): problems the model can learn, where a sound RL algorithm
must drive training accuracy above 95%. ``build`` does the same for any model, engine, dtype and task:

1. ``estimate_pass_rates``: N samples per problem through an engine (batches of problems, a progress bar),
   one JSONL line per finished problem in a cache folder keyed by everything that changes the samples, so an
   interrupted build resumes where it stopped and recomputes only unfinished problems;
2. ``select_window``: keep ``lo <= pass rate <= hi`` (an empty result raises with the histogram summary);
3. ``write_dataset``: ``data/<name>/`` as an HF ``DatasetDict`` (``train`` split, like the paper's set), the
   same rows as ``train.parquet``, every evaluated problem in ``pool.parquet``, and a card (``card.json`` +
   ``README.md``).

Resumed builds are statistically equivalent to uninterrupted ones, not bit-identical: the sampler seed is
drawn per engine call (``BuildConfig.seed`` and the first problem of the batch), and batches regroup after a
restart.

Over ~400 lines: one pipeline (sample, estimate each problem's solve rate, select, write with its card) whose steps
run in order and share their cache.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import numbers
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbkit.engines import ENGINE_DTYPES, SamplingConfig, make_engine
from nbkit.runtime import outputs, paths, pool
from nbkit.tasks import Task

HIST_BINS = 10
"""Equal-width pass-rate bins of the card's histogram ([0, 0.1), ..., [0.9, 1.0])."""
EXAMPLE_CHARS = 1500
"""Example responses kept per problem are cut to this many characters."""


@dataclass
class BuildConfig:
    """How pass rates are estimated and which problems are kept."""

    name: str = field(
        default="tiny_arith_sanity",
        metadata={"help": ("Output folder name: the dataset goes to ``data/<name>/`` unless ``out_dir`` is set.")},
    )
    out_dir: str = field(
        default="",
        metadata={
            "help": (
                'Where to write instead of ``data/<name>/`` (a relative path from the current directory); "" = default. The '
                "folder must be new, empty or an earlier dataset of the workbook (``nbkit.runtime.outputs``): nothing else is "
                "overwritten."
            )
        },
    )
    model: str = field(
        default="tiny-arith",
        metadata={
            "help": (
                "Model ref for ``nbkit.models.models.load`` / the engine: ``tiny-arith``, ``smollm2-135m``, a local HF path."
            )
        },
    )
    engine: str = field(
        default="hf", metadata={"help": ("Rollout engine kind for ``nbkit.engines.make_engine``: ``hf`` or ``vllm``.")}
    )
    dtype: str = field(
        default="fp32",
        metadata={
            "help": ("Engine dtype (``fp32``, ``bf16``, ``fp16``): pass rates are a property of model AND precision.")
        },
    )
    engine_kwargs: dict = field(
        default_factory=dict,
        metadata={"help": ("Extra keyword arguments for ``make_engine`` (e.g. vLLM's memory settings).")},
    )
    n_samples: int = field(default=40, metadata={"help": "N: responses sampled per problem (the paper: 40)."})
    lo: float = field(default=0.2, metadata={"help": "Lowest pass rate kept (inclusive; the paper: 0.2)."})
    hi: float = field(default=0.8, metadata={"help": "Highest pass rate kept (inclusive; the paper: 0.8)."})
    seed: int = field(default=0, metadata={"help": "Sampler seed (mixed with each batch's first problem)."})
    max_tokens: int = field(
        default=48,
        metadata={"help": ("Maximum response length; a truncated response usually has no answer and counts as wrong.")},
    )
    temperature: float = field(
        default=1.0, metadata={"help": ("Sampling temperature (1.0: the model's own distribution, as in RL rollouts).")}
    )
    top_p: float = field(
        default=1.0, metadata={"help": ("Nucleus sampling mass (1.0 = off, as in the paper's rollouts).")}
    )
    batch_prompts: int = field(
        default=64,
        metadata={"help": ("Problems per engine call (each call generates ``batch_prompts * n_samples`` responses).")},
    )
    cache_dir: str = field(
        default="", metadata={"help": ('Root of the pass-rate caches; "" = ``.cache/pass_rates`` of the project.')}
    )
    resume: bool = field(
        default=True,
        metadata={
            "help": ("Reuse cached pass rates (False: delete this configuration's cache first and sample everything).")
        },
    )

    def __post_init__(self) -> None:
        for name in ("n_samples", "batch_prompts", "max_tokens", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        if not 0.0 <= self.lo <= self.hi <= 1.0:
            raise ValueError(f"window must satisfy 0 <= lo <= hi <= 1, got lo={self.lo!r}, hi={self.hi!r}")
        if self.n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {self.n_samples!r}")
        if self.batch_prompts < 1:
            raise ValueError(f"batch_prompts must be >= 1, got {self.batch_prompts!r}")
        if self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {ENGINE_DTYPES}")
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")
        self.sampling()  # validates temperature, top_p, max_tokens

    def sampling(self, seed: int | None = None) -> SamplingConfig:
        """The engine's sampling parameters for one batch."""
        # one seed per request: a batch's pass rates must not depend on the batches before it (resume)
        return SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            n=self.n_samples,
            seed=self.seed if seed is None else seed,
            seeding="request",
        )

    def output_path(self) -> Path:
        """Where the dataset is written."""
        if not self.out_dir:
            return paths.DATA / self.name
        return Path(self.out_dir).expanduser().absolute()  # a relative path from the current directory, as a shell's


# ----------------------------------------------------------------------------------------------------------
# Cache


def problem_key(problem: dict) -> str:
    """A stable id of a problem (its text and reference answer)."""
    text = json.dumps([problem["problem"], problem["answer"]], ensure_ascii=False)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def model_fingerprint(ref: str) -> str:
    """Names, sizes and mtimes of a local model folder's files (a retrained model gets a new cache); "" if
    ``ref`` is not a local folder (``ref`` itself is in the key anyway)."""
    for cand in (Path(ref).expanduser(), paths.ROOT / ref, paths.DATA / "models" / ref):
        if cand.is_dir():
            stats = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in cand.iterdir() if p.is_file())
            return hashlib.sha1(json.dumps(stats).encode()).hexdigest()[:12]
    return ""


def cache_file(task: Task, cfg: BuildConfig) -> Path:
    """The JSONL file of this configuration: one folder per (model, engine, dtype, N, seed, template and its text,
    ...)."""
    key = dict(
        model=cfg.model,
        fingerprint=model_fingerprint(cfg.model),
        engine=cfg.engine,
        dtype=cfg.dtype,
        engine_kwargs=cfg.engine_kwargs,
        n=cfg.n_samples,
        seed=cfg.seed,
        template=task.cfg.template,
        template_text=[task.template.prefix, task.template.suffix],  # an edited template samples anew
        grader=task.cfg.grader,
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
    )
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    slug = f"{Path(cfg.model).name}-{cfg.engine}-{cfg.dtype}-n{cfg.n_samples}-s{cfg.seed}-{task.cfg.template}-{digest}"
    folder = (Path(cfg.cache_dir) if cfg.cache_dir else paths.CACHE / "pass_rates") / slug
    folder.mkdir(parents=True, exist_ok=True)
    outputs.write_json(folder / "key.json", key, indent=1, sort_keys=True)
    return folder / "rates.jsonl"


def read_cache(path: Path) -> dict[str, dict]:
    """Finished problems by key; a line cut short by a kill is ignored (that problem is recomputed)."""
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                done[rec["key"]] = rec
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return done


def _append(path: Path, records: list[dict]) -> None:
    """Append records as JSONL lines and flush them to disk (a kill loses at most the current batch)."""
    needs_newline = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with path.open("a") as f:
        f.write("\n" if needs_newline else "")
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------------------
# Pass rates


def _score(task: Task, problem: dict, rollouts: list, seconds: float) -> dict:
    """The cache record of one problem from its N rollouts."""
    correct, no_answer, example = 0, 0, {}
    for r in rollouts:
        ok = task.reward(r.text, problem["answer"]) > 0
        correct += ok
        no_answer += (not ok) and task.extract(r.text) is None
        example.setdefault("example_correct" if ok else "example_wrong", r.text[:EXAMPLE_CHARS])
    n = len(rollouts)
    return {
        "key": problem_key(problem),
        "n_samples": n,
        "n_correct": correct,
        "pass_rate": correct / n,
        "n_no_answer": no_answer,
        "n_truncated": sum(r.finish_reason == "length" for r in rollouts),
        "mean_tokens": sum(len(r.token_ids) for r in rollouts) / n,
        "seconds": seconds,
        "example_correct": example.get("example_correct"),
        "example_wrong": example.get("example_wrong"),
    }


def estimate_pass_rates(
    task: Task, problems: list[dict], cfg: BuildConfig, engine=None, progress: bool = True, workers: int | None = None
) -> tuple[list[dict], int]:
    """Pass rate of every problem over ``cfg.n_samples`` samples, reusing the cache.

    Returns (one record per problem, in order, merged with the problem's columns; number of problems
    sampled in this call). ``engine`` is any object with ``generate(prompts, sampling) -> list[Rollout]``;
    None makes one with ``make_engine`` only if something is left to sample.

    Without an ``engine``, the batches are split into consecutive parts sampled at once through ``nbkit.runtime.pool``
    (``workers``, else ``NBKIT_WORKERS``, else one part per free core; one thread each), each part with its own
    engine and its own cache file (``rates.part-<j>.jsonl``, folded into the cache in batch order afterwards, or at
    the next build when this one was cut off). A batch's samples depend only on its seed (``BuildConfig.seed`` and
    its first problem) and its problems, so the records are those of one batch after another in this process.
    """
    from tqdm.auto import tqdm

    path = cache_file(task, cfg)
    if not cfg.resume:
        for old in (path, *_part_files(path)):
            old.unlink(missing_ok=True)
    _fold_parts(path)  # a split build that was cut off: its parts' finished batches count
    done = read_cache(path)
    pending = [p for p in problems if problem_key(p) not in done]
    batches = [pending[start : start + cfg.batch_prompts] for start in range(0, len(pending), cfg.batch_prompts)]
    parts = pool.place(len(batches), 1, workers).workers if engine is None else 0
    if parts:
        size = -(-len(batches) // parts)
        chunks = [batches[j : j + size] for j in range(0, len(batches), size)]
        jobs = {
            f"part {j}": pool.Job(
                "nbkit.tasks.dataset:sample_batches",
                {"task": task, "cfg": cfg, "batches": chunk, "path": path.with_name(f"rates.part-{j}.jsonl")},
                units=sum(map(len, chunk)),
                poll=_lines(path.with_name(f"rates.part-{j}.jsonl")),
            )
            for j, chunk in enumerate(chunks)
        }
        try:
            pool.run(jobs, threads=1, workers=workers, progress=progress, desc="pass rates")
        finally:
            _fold_parts(path)
        done = read_cache(path)
        return [{**p, **done[problem_key(p)]} for p in problems], len(pending)
    if pending and engine is None:
        engine = make_engine(cfg.engine, cfg.model, cfg.dtype, **cfg.engine_kwargs)
    bar = tqdm(
        total=len(problems),
        initial=len(problems) - len(pending),
        desc="pass rates",
        unit="problem",
        disable=not progress,
    )
    for batch in batches:
        done.update((r["key"], r) for r in _sample_batch(task, cfg, batch, engine, path))
        bar.update(len(batch))
    bar.close()
    return [{**p, **done[problem_key(p)]} for p in problems], len(pending)


def _sample_batch(task: Task, cfg: BuildConfig, batch: list[dict], engine, path: Path) -> list[dict]:
    """One engine call: the batch's records, appended to ``path`` before they are returned."""
    seed = (cfg.seed * 1_000_003 + int(problem_key(batch[0]), 16)) % 2**31
    t0 = time.perf_counter()
    rollouts = engine.generate([task.prompt(p) for p in batch], cfg.sampling(seed))
    per_problem = (time.perf_counter() - t0) / len(batch)
    grouped = [[] for _ in batch]
    for r in rollouts:
        grouped[r.prompt_index].append(r)
    if any(len(g) != cfg.n_samples for g in grouped):
        raise RuntimeError(
            f"engine returned {[len(g) for g in grouped]} rollouts per prompt, expected {cfg.n_samples} each"
        )
    records = [_score(task, p, g, per_problem) for p, g in zip(batch, grouped)]
    _append(path, records)
    return records


def sample_batches(task: Task, cfg: BuildConfig, batches: list[list[dict]], path: Path) -> int:
    """A pool job of ``estimate_pass_rates``: sample ``batches`` with an engine of its own into ``path``; the
    number of problems sampled."""
    engine = make_engine(cfg.engine, cfg.model, cfg.dtype, **cfg.engine_kwargs)
    try:
        return sum(len(_sample_batch(task, cfg, batch, engine, path)) for batch in batches)
    finally:
        if hasattr(engine, "close"):
            engine.close()


def _part_files(path: Path) -> list[Path]:
    """The part files of a split build beside the cache file, in part order."""
    return sorted(path.parent.glob(f"{path.stem}.part-*.jsonl"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def _fold_parts(path: Path) -> None:
    """Append the finished records of every part file to the cache file, in part order, and remove the parts."""
    for part in _part_files(path):
        records = list(read_cache(part).values())
        if records:
            _append(path, records)
        part.unlink()


def _lines(path: Path):
    """A poll for ``pool.Job``: records written to ``path`` so far."""

    def poll() -> int:
        if not path.is_file():
            return 0
        with open(path, "rb") as f:
            return sum(1 for _ in f)

    return poll


# ----------------------------------------------------------------------------------------------------------
# Histogram and window


def histogram(rates: list[float], bins: int = HIST_BINS) -> dict:
    """Counts of pass rates in ``bins`` equal bins over [0, 1] (1.0 in the last), plus never/always solved."""
    counts = [0] * bins
    for r in rates:
        counts[min(int(r * bins + 1e-9), bins - 1)] += 1
    return {
        "edges": [round(i / bins, 6) for i in range(bins + 1)],
        "counts": counts,
        "n": len(rates),
        "never_solved": sum(r == 0 for r in rates),
        "always_solved": sum(r == 1 for r in rates),
        "mean": round(sum(rates) / len(rates), 6) if rates else None,
    }


def histogram_summary(h: dict) -> str:
    """One line a human can read: ``500 problems, mean 0.46, never 80, always 60; [0.0,0.1) 95 | ...``."""
    e, c = h["edges"], h["counts"]
    cells = " | ".join(f"[{e[i]:.1f},{e[i + 1]:.1f}{']' if i == len(c) - 1 else ')'} {c[i]}" for i in range(len(c)))
    return (
        f"{h['n']} problems, mean pass rate {h['mean']}, never solved {h['never_solved']}, "
        f"always solved {h['always_solved']}; {cells}"
    )


def in_window(rate: float, lo: float, hi: float) -> bool:
    """``lo <= rate <= hi`` with a tolerance for k/N rounding (8/40 is 0.2)."""
    return lo - 1e-9 <= rate <= hi + 1e-9


def select_window(records: list[dict], lo: float, hi: float) -> tuple[list[dict], list[dict]]:
    """(kept, rejected) by pass rate; raises ValueError with the histogram summary when nothing is kept."""
    kept = [r for r in records if in_window(r["pass_rate"], lo, hi)]
    if not kept:
        summary = histogram_summary(histogram([r["pass_rate"] for r in records]))
        raise ValueError(f"no problem has a pass rate in [{lo}, {hi}]; pass-rate histogram: {summary}")
    rejected = [r for r in records if not in_window(r["pass_rate"], lo, hi)]
    return kept, rejected


# ----------------------------------------------------------------------------------------------------------
# Output

DATA_COLUMNS = ("problem", "answer", "pass_rate", "n_correct", "n_samples", "source_index")
"""Columns of the written dataset, first (other columns of the source follow)."""
_CACHE_ONLY = ("key", "seconds", "example_correct", "example_wrong", "n_no_answer", "n_truncated", "mean_tokens")


def _rows(records: list[dict]) -> list[dict]:
    """Dataset rows: the source's columns and the pass-rate columns, without cache bookkeeping."""
    rows = []
    for r in records:
        row = {k: r[k] for k in DATA_COLUMNS}
        row.update({k: v for k, v in r.items() if k not in DATA_COLUMNS and k not in _CACHE_ONLY})
        rows.append(row)
    return rows


def render_card(card: dict) -> str:
    """The card as the dataset's README.md."""
    c, h0, h1 = card["counts"], card["histogram_pool"], card["histogram_kept"]
    table = "\n".join(
        f"| [{h0['edges'][i]:.1f}, {h0['edges'][i + 1]:.1f}{']' if i == len(h0['counts']) - 1 else ')'} "
        f"| {h0['counts'][i]} | {h1['counts'][i]} |"
        for i in range(len(h0["counts"]))
    )
    return f"""# {card["name"]}

A "perfectible" problem set (the sanity test of "Defeating the Training-Inference Mismatch via FP16"):
problems whose pass rate over {card["n_samples"]} samples of `{card["model"]}` ({card["engine"]} engine,
{card["dtype"]}) lies in [{card["window"][0]}, {card["window"][1]}]. Built by `nbkit.tasks.dataset.build`
(notebook `notebooks/01_build_dataset.ipynb`) on {card["created"]} in {card["time_seconds"]:.0f} s.

- source: `{card["task"]["source"]}`, template `{card["task"]["template"]}`, grader `{card["task"]["grader"]}`
- sampling: temperature {card["sampling"]["temperature"]}, top_p {card["sampling"]["top_p"]},
  max_tokens {card["sampling"]["max_tokens"]}, seed {card["seed"]}
- pool {c["pool"]}, unparsable reference answers {c["unparsable_answers"]}, duplicates {c["duplicates"]},
  evaluated {c["evaluated"]}; **kept {c["kept"]}**, below the window {c["below"]}, above it {c["above"]}
- responses without an answer: {card["responses_without_answer"]} of {card["responses_total"]};
  truncated at max_tokens: {card["responses_truncated"]}
- mean pass rate: pool {h0["mean"]}, kept {h1["mean"]}

| pass rate | pool | kept |
|---|---|---|
{table}

Files: `dataset_dict.json` + `train/` (`datasets.load_from_disk`), `train.parquet` (same rows),
`pool.parquet` (every evaluated problem with its pass rate), `card.json` (this card, machine-readable).
"""


DATASET_FILES = ("dataset_dict.json", "train", "train.parquet", "pool.parquet", "card.json", "README.md")
"""What a dataset build writes (and what a rebuild may replace in a folder whose marker predates its ``files`` list)."""


def write_dataset(kept: list[dict], pool: list[dict], card: dict, out: Path) -> Path:
    """Write the dataset folder and return its path: built complete in a temporary folder beside ``out``, then
    renamed into place, replacing an older build of the workbook there (``outputs.replace_folder``); a folder
    the workbook did not write, or a build of it holding anything else, is refused (``outputs.OutputFolderError``).
    A symlink ``out`` is followed: the folder it points at is rebuilt and the link kept."""
    out = outputs.check_replace(out, "dataset", "dataset folder", legacy=DATASET_FILES)
    tmp = outputs.temp_folder_beside(out)
    try:
        _write_files(tmp, kept, pool, card)
        outputs.write_marker(tmp, "dataset", name=card["name"], files=True)
        return outputs.replace_folder(tmp, out, "dataset", legacy=DATASET_FILES)
    except BaseException:
        if tmp.exists():
            shutil.rmtree(tmp)
        raise


def _write_files(tmp: Path, kept: list[dict], pool: list[dict], card: dict) -> None:
    """The files of a dataset folder (``datasets`` layout, parquet copies, card) into ``tmp``."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows(kept)
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp))
    pq.write_table(pa.Table.from_pylist(rows), tmp / "train.parquet")
    pool_rows = [{**row, "kept": in_window(row["pass_rate"], *card["window"])} for row in _rows(pool)]
    pq.write_table(pa.Table.from_pylist(pool_rows), tmp / "pool.parquet")
    (tmp / "card.json").write_text(json.dumps(card, indent=1, ensure_ascii=False) + "\n")
    (tmp / "README.md").write_text(render_card(card))


@dataclass
class BuildResult:
    """What ``build`` produced."""

    records: list[dict]
    """Every evaluated problem with its pass rate (and example responses)."""
    kept: list[dict]
    """The records inside the window (what was written)."""
    rejected: list[dict]
    """The records outside the window."""
    card: dict
    """The dataset card (also in ``card.json``; ``time_seconds`` covers this call, ``sampling_seconds`` the
    engine time of every evaluated problem, cached ones included)."""
    path: Path
    """The dataset folder."""


def build(task: Task, cfg: BuildConfig, engine=None, progress: bool = True, workers: int | None = None) -> BuildResult:
    """Estimate pass rates of ``task.problems``, keep the window, write ``cfg.output_path()`` with its card
    (``workers``: how many parts of the sampling run at once, see ``estimate_pass_rates``)."""
    t0 = time.perf_counter()
    outputs.check_replace(cfg.output_path(), "dataset", "dataset folder", legacy=DATASET_FILES)  # before any sampling
    if not task.problems:
        raise ValueError(f"task {task.cfg.source!r} has no problems")
    unique, seen = [], set()
    for p in task.problems:
        if problem_key(p) not in seen:
            seen.add(problem_key(p))
            unique.append(p)
    checkable = [p for p in unique if task.answer_ok(p["answer"])]
    if not checkable:
        raise ValueError(
            f"none of the {len(unique)} reference answers of {task.cfg.source!r} can be parsed "
            f"by grader {task.cfg.grader!r} (e.g. {unique[0]['answer']!r})"
        )
    records, sampled = estimate_pass_rates(task, checkable, cfg, engine, progress, workers)
    kept, rejected = select_window(records, cfg.lo, cfg.hi)
    rates = [r["pass_rate"] for r in records]
    card = {
        "name": cfg.name,
        "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": cfg.model,
        "engine": cfg.engine,
        "dtype": cfg.dtype,
        "n_samples": cfg.n_samples,
        "window": [cfg.lo, cfg.hi],
        "seed": cfg.seed,
        "sampling": {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens},
        "task": {k: v for k, v in asdict(task.cfg).items()},
        "counts": {
            "pool": len(task.problems),
            "duplicates": len(task.problems) - len(unique),
            "unparsable_answers": len(unique) - len(checkable),
            "evaluated": len(records),
            "sampled_this_run": sampled,
            "from_cache": len(records) - sampled,
            "kept": len(kept),
            "below": sum(r < cfg.lo - 1e-9 for r in rates),
            "above": sum(r > cfg.hi + 1e-9 for r in rates),
        },
        "responses_total": sum(r["n_samples"] for r in records),
        "responses_without_answer": sum(r["n_no_answer"] for r in records),
        "responses_truncated": sum(r["n_truncated"] for r in records),
        "histogram_pool": histogram(rates),
        "histogram_kept": histogram([r["pass_rate"] for r in kept]),
        "sampling_seconds": round(sum(r["seconds"] for r in records), 2),
    }
    card["time_seconds"] = round(time.perf_counter() - t0, 2)
    path = write_dataset(kept, records, card, cfg.output_path())
    return BuildResult(records, kept, rejected, card, path)


def examples(records: list[dict], k: int = 5, seed: int = 0) -> list[dict]:
    """``k`` seeded random records as short rows for a table: problem, answer, pass rate, a right and a wrong
    response."""
    import random

    pick = random.Random(seed).sample(records, min(k, len(records)))
    cols = ("problem", "answer", "pass_rate", "example_correct", "example_wrong")
    return [{c: (r[c][:300] if isinstance(r[c], str) else r[c]) for c in cols} for r in pick]


def load_card(path: str | Path) -> dict:
    """The card of a built dataset folder."""
    return json.loads((Path(path) / "card.json").read_text())
