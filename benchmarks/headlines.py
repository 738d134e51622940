"""A report folder's headline numbers against a stored snapshot (issue 71: `make report` before and after a refactor).

    python benchmarks/headlines.py snapshot REPORT_DIR OUT.json   # store a report's headlines (and its seconds)
    python benchmarks/headlines.py compare REPORT_DIR SNAPSHOT.json

``compare`` prints each notebook whose ``headline`` or ``published`` values differ from the snapshot (the first few
differing paths) and exits 1 when any does; seconds are printed side by side, never compared. Values that measure
time (seconds per step and the like) differ from run to run: read such a difference, don't count it.
"""

import json
import sys
from pathlib import Path


def headlines(report: Path) -> dict:
    """``notebook → {"headline", "published"}`` and ``notebook → seconds`` of a report folder."""
    notebooks = {}
    for path in sorted(report.glob("*.summary.json")):
        s = json.loads(path.read_text())
        notebooks[s["notebook"]] = {"headline": s["headline"], "published": s["published"]}
    run = json.loads((report / "run.json").read_text())
    return {"notebooks": notebooks, "seconds": {r["stem"]: round(r["seconds"]) for r in run["notebooks"]}}


def paths(a, b, where=""):
    """Each path at which ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b), key=str) for p in paths(a.get(k), b.get(k), f"{where}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in paths(x, y, f"{where}[{i}]")]
    return [] if a == b else [where]


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "snapshot":
        Path(argv[2]).write_text(json.dumps(headlines(Path(argv[1])), indent=1, ensure_ascii=False) + "\n")
        return 0
    if len(argv) != 3 or argv[0] != "compare":
        print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
        return 2
    now, then = headlines(Path(argv[1])), json.loads(Path(argv[2]).read_text())
    bad = 0
    for nb in sorted(set(now["notebooks"]) | set(then["notebooks"])):
        diff = paths(now["notebooks"].get(nb), then["notebooks"].get(nb))
        secs = f"{now['seconds'].get(nb, '-')} s now, {then['seconds'].get(nb, '-')} s then"
        print(f"{nb}: {'identical' if not diff else f'{len(diff)} differ: ' + ', '.join(diff[:4])} ({secs})")
        bad += bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
