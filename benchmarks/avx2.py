"""Run any command as if this AVX512 CPU were an AVX2-only one: the one AVX2 emulation of the benchmarks.

It sets, for the command and every process it starts:

* ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``: torch's, oneDNN's
  and MKL's kernels capped at AVX2 (``nbkit.precision.gemm`` then resolves ``auto`` to ``fp32-accumulate``, as on an
  AVX2
  CPU, and every measurement card names the caps: ``nbkit.precision.gemm.kernel_caps``);
* ``BENCH_EMULATE_AVX2=1`` with ``benchmarks/avx2_site`` first on ``PYTHONPATH``: torch's CPU-flag checks answer
  False in every Python process (``avx2_site/sitecustomize.py``), so vLLM-CPU loads its AVX2 build ``_C_AVX2`` with
  ``vec`` attention and its AVX2 choice of linear kernels.

What it cannot emulate: torch's C++ code still reads the real CPUID in places (e.g. its ``mkldnn_bf16_device_check``),
the caches, clock and memory bandwidth stay this machine's, and the AVX2 code runs on a core that also has AVX512
units. An emulation is not an AVX2 CPU; a result made under it says so. The run's ``sitecustomize`` is this one: another
on the path (a distribution's, say) is not loaded in it.

    .venv/bin/python benchmarks/avx2.py make report OUT=reports-avx2     # the main job, emulated
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent / "avx2_site"
CAP = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "BENCH_EMULATE_AVX2": "1",
}


def environment(base: dict | None = None, isa: str = "avx2") -> dict:
    """``base`` (default: this process's environment) with the AVX2 emulation on (``isa="avx2"``) or every part of
    it removed (``isa="native"``)."""
    env = dict(os.environ if base is None else base)
    for key in CAP:
        env.pop(key, None)
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SITE]
    if isa == "avx2":
        env.update(CAP)
        path.insert(0, str(SITE))
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    else:
        env.pop("PYTHONPATH", None)
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        return subprocess.call(argv, env=environment())
    except FileNotFoundError:
        print(
            f"benchmarks/avx2.py: no command {argv[0]!r} (give the command to run emulated, e.g. make report)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
