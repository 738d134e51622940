"""The benchmarks' AVX2 emulation (``benchmarks/avx2.py``): every Python process it starts sees an AVX2-only CPU to
torch's flag checks (what vLLM-CPU reads to pick its kernels) and runs torch / oneDNN / MKL capped at AVX2, so
``gemm="auto"`` picks the policy of an AVX2 CPU and every measurement card names the caps; leaving it removes all
of it again. It holds on any CPU: an AVX2 one already answers False."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import avx2  # noqa: E402

PROBE = (
    "import json, subprocess, sys, torch; from nbkit import results; from nbkit.precision import gemm; "
    "flags = [torch.cpu._is_avx512_supported(), torch.cpu._is_avx512_bf16_supported(), "
    "torch.cpu._is_amx_tile_supported()]; "
    "child = subprocess.run([sys.executable, '-c', 'import torch; print(torch.cpu._is_avx512_supported())'], "
    "capture_output=True, text=True).stdout.strip(); "
    "print(json.dumps({'flags': flags, 'child': child, 'auto': gemm.resolve('auto'), "
    "'caps': results.machine()['kernel_caps']}))"
)


def probe(*command_prefix):
    out = subprocess.run(
        [*command_prefix, sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=avx2.environment(isa="native"),
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_under_the_emulation_every_process_sees_avx2_and_the_cards_name_the_caps():
    seen = probe(sys.executable, str(ROOT / "benchmarks" / "avx2.py"))
    assert seen["flags"] == [False, False, False] and seen["child"] == "False"
    assert seen["auto"] == "fp32-accumulate"
    assert seen["caps"] == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    }


def test_leaving_the_emulation_removes_every_part_of_it():
    on = avx2.environment({"PYTHONPATH": "/elsewhere", "KEEP": "1"})
    assert on["PYTHONPATH"].split(":")[0] == str(avx2.SITE) and on["BENCH_EMULATE_AVX2"] == "1"
    off = avx2.environment(on, isa="native")
    assert off == {"PYTHONPATH": "/elsewhere", "KEEP": "1"}
    assert probe()["caps"] == {}


def test_a_command_that_does_not_exist_is_named():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "avx2.py"), "no-such-command"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "no command 'no-such-command'" in out.stderr
