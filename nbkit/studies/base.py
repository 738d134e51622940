"""The shape every study shares: a grid of run configs → run a shard (resumable) → store finished runs with a card
→ load → table → figure.

``Study`` is the read half every stored study has (its question, the statistic, a table and computed sentences);
``GridStudy`` adds the write half for studies made of RL runs: ``grid`` names every run's ``RLConfig``, ``run``
trains the unfinished runs of a shard (a finished run is never re-run, so a killed study resumes where it stopped),
``store`` keeps finished runs only and lists the missing ones on the card. A run's coordinates in the grid (dtype,
seed, ...) are read from its config (``coords``), never parsed from its folder name.

What ``store`` would change in a stored study is said by ``nbkit.studies.stored``; tables and sentences are written
by ``nbkit.studies.prose``.
"""

from __future__ import annotations

import inspect
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from nbkit import results
from nbkit.records import runlog
from nbkit.records.runlog import KIND, RESULT_NEUTRAL, MetricsLog, last_logged_step, last_step, result_differences
from nbkit.runtime import locks, outputs, pool
from nbkit.studies.prose import markdown_table as markdown_table  # (re-exported: the studies' table writer)
from nbkit.studies.stored import keep_stored_change, ran_on, store_change


class StoredStudyError(FileExistsError):
    """``store`` would replace a stored study with other runs or another grid without ``replace``: nothing changed."""


class Study:
    """One stored study under ``data/results/<name>`` and how to read it."""

    name: str = ""
    """Folder name under ``data/results`` (``nbkit.results``)."""
    title: str = ""
    """Heading in RESULTS.md."""
    question: str = ""
    """What the study asks, and its primary comparison and rule, stated before any result."""
    statistic: str = ""
    """The statistic the table reports: windows, seeds, intervals."""
    notebook: str = ""
    """The notebook that draws from this study, if any."""

    def load(self, root: Path = results.RESULTS) -> dict[str, list[dict]]:
        """``label → metric rows`` of the stored study."""
        return results.load(self.name, root)

    def card(self, root: Path = results.RESULTS) -> dict:
        """The stored study's provenance card."""
        return results.card(self.name, root)

    def stored_meta(self, root: Path = results.RESULTS) -> dict[str, dict]:
        """``label → coordinates`` of the stored runs (empty for a study that is not a grid of runs)."""
        return {}

    def reproduce(self, card: dict) -> str:
        """The command that re-makes the stored study today (the card's own command for a non-grid study)."""
        return card.get("command", "")

    def verify(self, root: Path = results.RESULTS) -> list[str]:
        """What is wrong with the stored study's files ([] when nothing): ``results.verify`` (a file changed after
        ``store``, a card disagreeing with its runs)."""
        return results.verify(self.name, root)

    def sitting_commit(self, card: dict, index: int) -> str:
        """How the page's provenance line names the commit of sitting ``index`` (``results.parts``): the one checked
        out when it was stored, and whether the tree had uncommitted changes."""
        p = results.parts(card)[index]
        return f"commit `{(p.get('commit') or 'unknown')[:10]}{' with uncommitted changes' if p.get('dirty') else ''}`"

    def table(self, runs: dict[str, list[dict]], meta: dict[str, dict]) -> list[dict]:
        """Rows of the study's table (``meta``: each run's coordinates in the grid)."""
        raise NotImplementedError

    def findings(self, runs: dict[str, list[dict]], meta: dict[str, dict], rows: list[dict]) -> list[str]:
        """Plain sentences computed from the runs and the table (no number typed by hand)."""
        return []

    def page_tables(
        self, runs: dict[str, list[dict]], meta: dict[str, dict], rows: list[dict]
    ) -> list[tuple[str, list[dict]]]:
        """Further ``(caption, rows)`` tables the page shows under the main one (none by default)."""
        return []

    def figure(self, runs: dict[str, list[dict]], meta: dict[str, dict]):
        """The study's key figure (plotly), or None."""
        return None

    amendments: tuple = ()
    """Changes made after training began (``nbkit.studies.amendments``: ``key``, ``what``, ``commit``, ``time`` and
    ``why`` each), put on the stored card by ``record_amendments``."""
    amendment_record: dict = {}
    """``rule``, ``training_started`` and ``outcomes_read`` set on the card beside them (none here)."""

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``amendment key → the readings and verdicts it moved``, computed from ``runs`` (none by default)."""
        return {}

    def record_amendments(self, root: Path = results.RESULTS) -> None:
        """Put ``amendments`` on the stored card, each with what it moved (``moves`` of the stored runs)."""
        from nbkit.studies.amendments import put

        moved = self.moves(self.load(root), self.stored_meta(root))
        put(self.name, self.amendments, moved, root, **self.amendment_record)

    def plan(self) -> list[str]:
        """Sentences a page shows while the study is not stored yet (its committed rule, its planned power)."""
        return []


class GridStudy(Study):
    """A study made of RL runs over a grid of configs, trained into ``output_dir/<label>``."""

    output_dir: str = ""
    """Parent folder of the runs (default ``runs/<name>``); kept, so a cut-off study resumes."""
    twins: int = 1
    """Runs that form one comparison and sit next to each other in ``grid`` (e.g. 2 for FP16/BF16 twins): shards
    deal them alternately so every shard gets each variant alike."""
    toy: dict = {}
    """Options of the smallest grid that still runs every code path (seconds): what the study-shape test trains."""

    def grid(self, **options) -> dict:
        """``label → RLConfig`` of every run (``output_dir`` under ``self.folder(options)``), all validated."""
        raise NotImplementedError

    def coords(self, config: dict) -> dict:
        """A run's coordinates in the grid, read from its config (``RLConfig.to_dict()``; by default
        ``nbkit.records.runlog.coords``: algorithm, dtypes and seed)."""
        return runlog.coords(config)

    # -- where runs live -------------------------------------------------------------------------------------
    def folder(self, options: dict | None = None) -> Path:
        """The parent folder of this study's run folders."""
        return Path((options or {}).get("output_dir") or self.output_dir or f"runs/{self.name}")

    @staticmethod
    def finished(cfg) -> bool:
        """Whether ``cfg``'s run folder holds this very run (its ``config.json`` equals ``cfg`` in every field that
        changes the result, ``max_steps`` included: ``runlog.result_differences``) with all its steps logged: a finished
        run of other settings (a 100-step run for a 50-step grid too) is not this run."""
        out = Path(cfg.output_dir)
        if not (out / "metrics.jsonl").is_file() or not (out / "config.json").is_file():
            return False
        try:
            saved = json.loads((out / "config.json").read_text())
        except (OSError, ValueError):
            return False
        return not result_differences(saved, cfg) and last_logged_step(out) >= cfg.max_steps

    @staticmethod
    def other_setting(cfg) -> list[str]:
        """The differing fields (``runlog.result_differences``: every field that changes the result) when ``cfg``'s
        run folder holds a workbook run of another setting ([] for none, an unreadable config, or a run of this one)."""
        if (outputs.read_marker(Path(cfg.output_dir)) or {}).get("kind") != KIND:
            return []  # not a run of the workbook: train refuses the folder itself (nbkit.runtime.outputs)
        try:
            saved = json.loads((Path(cfg.output_dir) / "config.json").read_text())
        except (OSError, ValueError):
            return []
        return result_differences(saved, cfg) if isinstance(saved, dict) else []

    def shard_of(self, j: int, n: int) -> int:
        """The shard of the grid's ``j``-th run: every n-th, shifted by one per group of ``twins`` (when runs come
        in twins) so that plain dealing does not give each of two shards one variant."""
        if self.twins <= 1:
            return j % n
        return (j + j // self.twins) % n

    # -- write half ------------------------------------------------------------------------------------------
    def run(
        self,
        shard: tuple[int, int] = (0, 1),
        progress: bool = True,
        keep_stored: bool = False,
        root: Path = results.RESULTS,
        overwrite: bool = False,
        threads: int = 1,
        workers: int | None = None,
        beside: dict | None = None,
        **options,
    ):
        """Train every unfinished run of shard ``i/n`` (an unfinished run restarts from step 0; a finished one is
        read back); returns ``label → rows`` of the shard's runs trained or found in their folders.
        ``keep_stored``: a run the stored study already holds with this very config counts as finished (a study
        continued in a later sitting, on another machine, trains only what its card lists as missing).
        A run folder holding a run of another setting (``other_setting``) is refused, naming the differing fields,
        before anything trains, unless ``overwrite``; so is a second process on the same shard (``shard_lock``).
        ``threads`` / ``workers``: how runs share the cores (``nbkit.rl.grid.train_all``; the rows do not depend on
        ``workers``). ``beside``: other jobs (``label → nbkit.runtime.pool.Job``) run in the same pool as the runs; with
        it
        the value is ``(label → rows, label → the jobs' values)``."""
        _check_shard(shard)
        with self.shard_lock(shard, options):  # a second process on this shard: one line, before anything trains
            return self._run(shard, progress, keep_stored, root, overwrite, threads, workers, beside, **options)

    def shard_lock(self, shard: tuple[int, int], options: dict) -> locks.FolderLock:
        """The lock one process holds on shard ``i/n`` of this study for its ``run`` (``nbkit.runtime.locks``, a file
        in the study's folder per shard: the shards of one study may run at once, one shard twice may not)."""
        return locks.FolderLock(
            self.folder(options),
            f"study {self.name} shard {shard[0]}/{shard[1]}: its folder",
            f"{locks.LOCK}-shard-{shard[0]}-of-{shard[1]}",
        )

    def _run(self, shard, progress, keep_stored, root, overwrite, threads, workers, beside, **options):
        """``run``'s work, inside the shard's lock."""
        from nbkit.rl import grid

        todo, fresh = self._todo(shard, keep_stored, root, overwrite, **options)
        if fresh:
            print(
                f"[nbkit] {self.name} shard {shard[0]}/{shard[1]}: {len(fresh)} of {len(todo)} run(s) to train",
                flush=True,
            )
        values = (
            grid.train_all(fresh, progress=progress, threads=threads, workers=workers, beside=beside)
            if (fresh or beside)
            else {}
        )
        runs, _ = self.collect(**options)
        rows = {k: runs[k] for k in todo if k in runs}
        return rows if beside is None else (rows, {k: values[k] for k in beside})

    def _todo(self, shard, keep_stored: bool, root: Path, overwrite: bool, **options) -> tuple[dict, dict]:
        """``(label → config)`` of shard ``i/n``'s runs to have, and of those to train now (``run``'s checks)."""
        i, n = _check_shard(shard)
        grid = self.grid(**options)
        stored = self.stored_runs(grid, root)[1] if keep_stored else {}
        todo = {k: c for j, (k, c) in enumerate(grid.items()) if self.shard_of(j, n) == i and k not in stored}
        if not overwrite:  # before any run trains: a run of another setting is never replaced silently
            others = [
                f"{cfg.output_dir}: {'; '.join(diffs)}" for cfg in todo.values() if (diffs := self.other_setting(cfg))
            ]
            if others:
                raise FileExistsError(
                    f"study {self.name}: {len(others)} run folder(s) hold a run of another setting, which this grid "
                    f"would replace: {' | '.join(others[:3])}{' | ...' if len(others) > 3 else ''}; pass --overwrite "
                    f"(overwrite=True) to replace them, keeping nothing, or --set output_dir=<another folder>"
                )
        fresh = {k: replace(c, overwrite=True, resume=False) for k, c in todo.items() if not self.finished(c)}
        from nbkit.rl.runfolder import plan_run

        for cfg in fresh.values():  # every run folder checked here, before any run trains in a pool worker
            plan_run(cfg)
        return todo, fresh

    def jobs(
        self,
        shard: tuple[int, int] = (0, 1),
        keep_stored: bool = False,
        root: Path = results.RESULTS,
        overwrite: bool = False,
        **options,
    ) -> dict:
        """``label → nbkit.runtime.pool.Job`` of the runs ``run`` would train now (after its checks), to train in
        another
        pool (``nbkit.rl.grid.train_grid(beside=...)``); ``live`` with the same options then reads them back."""
        from nbkit.rl import grid

        return grid.train_jobs(self._todo(shard, keep_stored, root, overwrite, **options)[1])

    def stored_runs(self, grid: dict, root: Path = results.RESULTS) -> tuple[dict[str, list[dict]], dict[str, dict]]:
        """``(label → rows, label → config)`` of the stored study's runs that are runs of ``grid``: same label, the
        saved config equal in every field that changes the run, and every step logged (empty when nothing is
        stored)."""
        if not (results.study_dir(self.name, root) / results.CARD).is_file():
            return {}, {}
        saved = self.card(root).get("configs", {}).get("runs", {})
        rows = self.load(root)
        keep = [
            k
            for k, cfg in grid.items()
            if k in saved
            and k in rows
            and not result_differences(saved[k], cfg)
            and last_step(rows[k]) >= cfg.max_steps
        ]
        return {k: rows[k] for k in keep}, {k: saved[k] for k in keep}

    def collect(self, **options) -> tuple[dict[str, list[dict]], dict[str, dict]]:
        """``(label → rows, label → config)`` of the grid's *finished* runs found in their folders."""
        runs, configs = {}, {}
        for label, cfg in self.grid(**options).items():
            out = Path(cfg.output_dir)
            if self.finished(cfg) and (out / "config.json").is_file():
                runs[label] = MetricsLog.read(out / "metrics.jsonl")
                configs[label] = json.loads((out / "config.json").read_text())
        return runs, configs

    def store(
        self,
        *,
        wall_seconds: float,
        command: str,
        root: Path = results.RESULTS,
        keep_stored: bool = False,
        replace: bool = False,
        **options,
    ) -> Path:
        """Store every finished run of the grid (a partial run is never stored); the card holds each run's config
        and names the grid's runs that are missing or were cut off. ``keep_stored``: the stored study is only added
        to: its runs stay byte for byte (a run stored already keeps its stored rows), the grid's runs it lacks are
        added, and the card lists every sitting that made them (``results.parts``); a stored study of another grid,
        or holding a run that is not a run of this grid, is refused with ``StoredStudyError`` (nothing changed)
        unless ``replace`` (the old study kept beside). Without ``keep_stored``, a stored study whose grid or runs
        differ is replaced only with ``replace`` (and kept beside as ``<name>.replaced-<date>``); otherwise
        ``StoredStudyError`` says ``N stored runs -> M`` and the differing grid fields. The same runs of the same
        grid stored again write nothing."""
        grid = self.grid(**options)
        runs, configs = self.collect(**options)
        earlier, record = None, None
        fresh = set(runs)  # the runs this sitting adds (keep_stored: those not stored yet)
        stored = (results.study_dir(self.name, root) / results.CARD).is_file()
        if keep_stored and stored:
            kept, kept_configs = self.stored_runs(grid, root)
            other = keep_stored_change(self, options, kept, root)
            if other and not replace:
                raise StoredStudyError(
                    f"study {self.name}: --keep-stored only adds runs of the stored study's grid, but {other}; "
                    f"nothing was changed: store the stored grid's options (its card's configs.grid), or pass "
                    f"--replace to replace the stored study (it is kept beside as {self.name}.replaced-<date>)"
                )
            differ = sorted(k for k in set(kept) & set(runs) if _plain_rows(runs[k]) != kept[k])
            if differ:  # only ever added to: the stored copy stays, the run folder's copy is not stored
                print(
                    f"[nbkit] {self.name}: {len(differ)} run(s) are stored already and keep their stored rows, not "
                    f"the run folders' (which differ): {differ[:6]}{' ...' if len(differ) > 6 else ''}",
                    flush=True,
                )
            runs = {k: v for k, v in runs.items() if k not in kept}
            fresh = set(runs)
            if not runs and not other:
                print(
                    f"[nbkit] {self.name}: no run of this grid to add to the {len(kept)} stored: unchanged",
                    flush=True,
                )
                return results.study_dir(self.name, root)
            if kept:
                earlier = [
                    {**p, "runs": sorted(set(p.get("runs") or []) & set(kept))} for p in results.parts(self.card(root))
                ]
                earlier = [p for p in earlier if p["runs"]]
                from nbkit.studies.amendments import RECORD_KEYS

                record = {k: v for k, v in self.card(root).items() if k in RECORD_KEYS}  # the rule's record stays
                runs = {**kept, **runs}
                configs = {**{k: kept_configs[k] for k in kept}, **configs}
            runs = {k: runs[k] for k in grid if k in runs}  # the grid's order
            configs = {k: configs[k] for k in runs}
        if not runs:
            raise ValueError(f"no finished run of {self.name}'s grid under {self.folder(options)}: nothing to store")
        if not keep_stored and stored:
            change = store_change(self, options, runs, configs, root)
            if not change:  # the same study again: nothing is written, so the stored files stay byte for byte
                print(
                    f"[nbkit] {self.name}: the stored study already holds these {len(runs)} runs of this grid: "
                    f"unchanged",
                    flush=True,
                )
                return results.study_dir(self.name, root)
            if not replace:
                raise StoredStudyError(
                    f"study {self.name}: {change}; the stored study is replaced only on purpose: "
                    f"pass --replace (it is kept beside as {self.name}.replaced-<date>), or "
                    f"--keep-stored to add runs to it"
                )
        missing = sorted(set(grid) - set(runs))
        record = {**self.card_record(options), **(record or {})}  # a stored card's record (first sitting) wins
        return results.store(
            self.name,
            runs,
            command=command,
            wall_seconds=wall_seconds,
            root=root,
            earlier=earlier,
            record=record,
            keep_old=replace,
            ran_on=ran_on(self.name, {k: Path(grid[k].output_dir) for k in sorted(fresh)}),
            configs={"grid": {k: v for k, v in options.items()}, "runs": configs},
            notes=f"{len(missing)} of the grid's {len(grid)} runs not stored (not run or not finished): {missing}"
            if missing
            else "",
        )

    def card_record(self, options: dict) -> dict:
        """Fields of the study's record to write on its card at ``store`` (``nbkit.studies.amendments``: ``rule``,
        ``training_started``; none by default)."""
        return {}

    # -- read half: coordinates from configs ----------------------------------------------------------------
    def meta(self, configs: dict[str, dict]) -> dict[str, dict]:
        """``label → coordinates`` from ``label → config``."""
        return {label: self.coords(cfg) for label, cfg in configs.items()}

    def stored_meta(self, root: Path = results.RESULTS) -> dict[str, dict]:
        """``label → coordinates`` of the stored runs, from the configs on the card."""
        return self.meta(self.card(root)["configs"]["runs"])

    def grid_options(self, card: dict) -> dict:
        """The grid options a stored study was made with (from its card)."""
        return dict(card.get("configs", {}).get("grid", {}))

    def defaults(self) -> dict:
        """The grid's default options (``reproduce`` names only the options that differ)."""
        return {}

    def verify(self, root: Path = results.RESULTS) -> list[str]:
        """``Study.verify``, and the card's grid against its runs' configs: a grid option (its default when the card
        names none) that is a field of every stored run's config, or one of its ``overrides``, holds the same value
        in each (a card saying 50 steps over runs of 100 disagrees with them); an option or a config under a field's
        old name (``runlog.RENAMED``: the grid's ``steps``) as that field. Reads the card only (no grid is built: no
        torch)."""
        problems = super().verify(root)
        card = self.card(root)
        configs = {k: runlog.renamed(c) for k, c in ((card.get("configs") or {}).get("runs") or {}).items()}
        options = {**json.loads(json.dumps(self.defaults(), default=str)), **self.grid_options(card)}
        fixed = {runlog.RENAMED.get(k, k): v for k, v in options.items() if k not in RESULT_NEUTRAL and configs}
        fixed = {k: v for k, v in fixed.items() if all(k in c for c in configs.values())}
        if isinstance(options.get("overrides"), dict):
            fixed |= {k: v for k, v in runlog.renamed(options["overrides"]).items() if k not in RESULT_NEUTRAL}
        other = [
            f"{label}: {k} (card's grid: {json.dumps(v)}, run: {json.dumps(cfg.get(k))})"
            for label, cfg in configs.items()
            for k, v in fixed.items()
            if k in cfg and cfg[k] != v
        ]
        if other:
            problems.append(
                f"{len(other)} run config value(s) on its card disagree with its card's grid: "
                f"{' | '.join(other[:3])}{' | ...' if len(other) > 3 else ''}"
            )
        return problems

    def reproduce(self, card: dict) -> str:
        import shlex

        plain = json.loads(json.dumps(self.defaults()))  # tuples as lists, as they come back from a card
        sets = "".join(
            f" --set {shlex.quote(f'{k}={json.dumps(v)}')}"
            for k, v in self.grid_options(card).items()
            if k != "output_dir" and plain.get(k, object()) != v
        )
        return f"nbkit study {self.name} run{sets} && nbkit study {self.name} store{sets}"

    def live(
        self,
        shard: tuple[int, int] = (0, 1),
        progress: bool = True,
        threads: int = 1,
        workers: int | None = None,
        beside: dict | None = None,
        **options,
    ):
        """Train (or read back) the grid now: ``(label → rows, label → coordinates)`` and the seconds it took;
        with ``beside`` (other jobs run in the same pool as the runs, see ``run``) a fourth item, their values."""
        start = time.perf_counter()
        out = self.run(shard, progress, threads=threads, workers=workers, beside=beside, **options)
        runs, values = out if beside is not None else (out, None)
        _, configs = self.collect(**options)
        meta = self.meta({k: configs[k] for k in runs})
        seconds = time.perf_counter() - start
        return (runs, meta, seconds) if beside is None else (runs, meta, seconds, values)

    def start_live(self, **options) -> Future:
        """``live(**options)`` started in the background: a future of its ``(runs, meta, seconds)``, awaited
        (``.result()``) in the section that shows the runs, so a page can train its slice while earlier sections
        compute. The grid is built first, here, so a bad option is refused before anything starts. Its runs always
        train in worker processes, at least one even for a single run or on a GPU (where ``live`` would train in this
        process), so that the caller's work meanwhile shares no RNG, GEMM policy or default dtype with them."""
        if options.get("beside"):
            raise ValueError("start_live takes no beside jobs: start them in the background too, or run them here")
        own = inspect.signature(self.run).parameters  # run's own arguments; every other option is a grid option
        grid = self.grid(**{k: v for k, v in options.items() if k not in own})  # bad options: refused here, now
        placed = pool.place(len(grid), options.get("threads", 1), options.pop("workers", None))  # as live would
        workers = max(1, placed.workers)  # but never in this process
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-live").submit(
            self.live, workers=workers, **options
        )


def add_run(grid: dict, base, label: str, **fields) -> None:
    """Put run ``label`` in ``grid``: ``base`` (an ``RLConfig``) with ``fields`` changed, trained into
    ``base.out / label`` (``replace`` re-validates the config)."""
    grid[label] = replace(base, output_dir=str(base.out / label), **fields)


def group_seeds(runs: dict[str, list[dict]], meta: dict[str, dict], key) -> dict:
    """``key(coordinates) → seed → rows`` of ``runs`` (a run whose ``key`` is None is left out)."""
    out: dict = {}
    for label, rows in runs.items():
        if (k := key(meta[label])) is not None:
            out.setdefault(k, {})[meta[label]["seed"]] = rows
    return out


def _plain_rows(rows: list[dict]) -> list[dict]:
    """``rows`` as they read back from a stored study (numpy scalars, paths and tuples as JSON has them)."""
    return json.loads(json.dumps(rows, default=results._plain))


def _check_shard(shard) -> tuple[int, int]:
    i, n = shard
    if not (isinstance(n, int) and n >= 1 and isinstance(i, int) and 0 <= i < n):
        raise ValueError(f"shard must be (i, n) with 0 <= i < n, got {shard!r}")
    return i, n
