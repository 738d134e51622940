"""What ``GridStudy.store`` would change in a stored study: the grid options and runs that differ, in one line; and
which machine the runs it adds ran on (``ran_on``).

``store`` refuses to replace or add to a stored study of another grid, or holding other runs, unless asked to; these
functions say what differs (``N stored runs -> M``, the grid fields, the runs gone, new and changed).
"""

from __future__ import annotations

import json
from pathlib import Path

from nbkit import results
from nbkit.records.runlog import RESULT_NEUTRAL, renamed


def grid_changes(study, options: dict, card: dict) -> list[str]:
    """``field (stored: ..., now: ...)`` for every grid option (``output_dir`` aside) where ``options`` differ
    from the grid the stored ``card`` was made with."""
    stored_grid = study.grid_options(card)
    now = json.loads(json.dumps(options, default=str))
    return [
        f"{k} (stored: {json.dumps(stored_grid.get(k))}, now: {json.dumps(now.get(k))})"
        for k in sorted(set(stored_grid) | set(now))
        if k != "output_dir" and stored_grid.get(k) != now.get(k)
    ]


def keep_stored_change(study, options: dict, kept: dict, root: Path = results.RESULTS) -> str:
    """Why runs of the grid ``options`` cannot simply be added to the stored study ("" when they can): its grid
    differs, or some stored run is not a run of this grid (``stored_runs``: another config, or cut short), so
    storing would drop or replace it."""
    fields = grid_changes(study, options, study.card(root))
    lost = sorted(set(results.load(study.name, root)) - set(kept))
    parts = []
    if fields:
        parts.append("grid fields that differ: " + "; ".join(fields))
    if lost:
        parts.append(
            f"{len(lost)} stored run(s) are not runs of this grid and would be lost: "
            f"{lost[:6] + (['...'] if len(lost) > 6 else [])}"
        )
    return "; ".join(parts)


def store_change(
    study, options: dict, runs: dict[str, list[dict]], configs: dict[str, dict], root: Path = results.RESULTS
) -> str:
    """How ``runs`` of the grid ``options`` differ from the stored study ("" when they are the same runs, row for
    row, of the same grid): ``N stored runs -> M``, then the differing grid fields and runs."""
    card = study.card(root)
    fields = grid_changes(study, options, card)
    stored_configs = card.get("configs", {}).get("runs", {})
    stored_rows = study.load(root)

    def same_config(a: dict, b: dict) -> bool:  # a stored config under a field's old name as the new (``renamed``)
        return {k: v for k, v in renamed(a).items() if k not in RESULT_NEUTRAL} == {
            k: v for k, v in renamed(b).items() if k not in RESULT_NEUTRAL
        }

    plain = json.loads(json.dumps(runs, default=results._plain))
    plain_configs = json.loads(json.dumps(configs, default=str))
    changed = sorted(
        k
        for k in set(runs) & set(stored_rows)
        if stored_rows[k] != plain[k] or not same_config(stored_configs.get(k, {}), plain_configs[k])
    )
    if not fields and set(runs) == set(stored_rows) and not changed:
        return ""
    parts = [f"{len(stored_rows)} stored runs -> {len(runs)}"]
    if fields:
        parts.append("grid fields that differ: " + "; ".join(fields))
    gone, new = sorted(set(stored_rows) - set(runs)), sorted(set(runs) - set(stored_rows))
    if gone:
        parts.append(f"stored runs not in the new study: {gone[:6] + (['...'] if len(gone) > 6 else [])}")
    if new:
        parts.append(f"new runs: {new[:6] + (['...'] if len(new) > 6 else [])}")
    if changed:
        parts.append(f"runs whose rows or config differ: {changed[:6] + (['...'] if len(changed) > 6 else [])}")
    return "; ".join(parts)


def ran_on(study: str, folders: dict[str, Path]) -> dict | None:
    """The machine record the finished runs in ``folders`` (``label → run folder``) wrote in their
    ``summary.json`` (``nbkit.rl.run``), the one a sitting's card names; None when none wrote one (runs older than
    the record: the storing process's machine stands in). Runs that ran on different machines are refused, naming
    them: one sitting has one machine, so store each machine's runs in a sitting of its own."""
    seen: dict[str, list[str]] = {}
    records: dict[str, dict] = {}
    for label, folder in folders.items():
        try:
            record = json.loads((folder / "summary.json").read_text()).get("machine")
        except (OSError, ValueError):
            record = None
        if record:
            key = json.dumps(record, sort_keys=True)
            seen.setdefault(key, []).append(label)
            records[key] = record
    if len(seen) > 1:
        where = "; ".join(
            f"{records[k].get('cpu')}{results.caps_text(records[k])}: {labels}" for k, labels in seen.items()
        )
        raise ValueError(
            f"study {study}: the runs to store ran on {len(seen)} machines ({where}); one sitting has one machine: "
            f"store each machine's runs in a sitting of its own (--keep-stored), moving the others' folders aside"
        )
    return next(iter(records.values()), None)
