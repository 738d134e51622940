"""``nbkit doctor``: the command line of ``nbkit.offline.doctor`` (flags, the setup linted, the HTML report).

nbkit doctor --model smollm2-135m                 # vLLM where installed, else the HF engine
nbkit doctor --model tiny-arith --engine hf --target-length 40
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path

from nbkit.cli.commands import Parser
from nbkit.cli.train import read_config_file
from nbkit.offline import doctor, lints
from nbkit.offline.doctor import DoctorConfig, DoctorResult
from nbkit.plots import anatomy as anatomy_plots
from nbkit.plots import doctor as doctor_plots
from nbkit.plots import mismatch as plots
from nbkit.precision import gemm
from nbkit.rl.config import RLConfig
from nbkit.runtime import outputs
from nbkit.runtime.paths import REPORTS
from nbkit.workbook import report
from nbkit.workbook.runner import check_out_name


def write_html(result: DoctorResult, out: Path) -> Path:
    """``doctor.html`` (verdict, table, figures with plotly.js inlined once: viewable offline) and ``doctor.json``."""
    outputs.check_listed(out, doctor.KIND, "doctor folder")  # new, empty or an earlier doctor report: never a user's
    figures = [doctor_plots.crossing_figure(result)]
    if result.pairs:
        pairs = result.pairs
        figures += [
            plots.token_scatter(pairs),
            plots.seq_log_ratio_vs_length(pairs),
            plots.metrics_table(
                {d: {k: v for k, v in g.items() if isinstance(v, float)} for d, g in result.diagnoses.items()}
            ),
        ]
    for res in result.anatomies.values():
        figures += [
            anatomy_plots.waterfall(res, "format"),
            anatomy_plots.waterfall(res, "implementation"),
            anatomy_plots.layer_figure(res),
        ]
    body = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figures))
    reasons = "".join(f"<li>{html.escape(r)}</li>" for r in result.reasons)
    findings = "".join(
        f"<li><b>{html.escape(f.code)}</b>: {html.escape(f.setting)}<br>consequence: "
        f"{html.escape(f.consequence)}<br>fix: {html.escape(f.fix)}</li>"
        for f in result.findings
    )
    reasons += (
        f"</ul><h2>Setup: {len(result.findings)} finding(s)</h2><ul>{findings}"
        if result.findings
        else "</ul><h2>Setup: no finding</h2><ul>"
    )
    prov = provenance()
    page = (
        "<!doctype html><meta charset='utf-8'><title>nbkit doctor</title>"
        "<style>body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}"
        "dl.prov{display:grid;grid-template-columns:max-content auto;gap:2px 14px} dl.prov dt{font-weight:bold} "
        "dl.prov dd{margin:0}</style>"
        f"<h1>nbkit doctor: {html.escape(result.config.model)}</h1>"
        "<dl class='prov'>"
        + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in prov.items())
        + "</dl>"
        f"<h2>Verdict: {html.escape(result.verdict)}</h2><ul>{reasons}</ul>"
        f"<pre>{html.escape(result.text())}</pre>" + body
    )
    listed = (outputs.read_marker(out) or {}).get("files") or []
    outputs.write_marker(
        out, doctor.KIND, model=result.config.model, files=sorted({*listed, "doctor.html", "doctor.json"})
    )
    outputs.write_text(out / "doctor.html", page)
    outputs.write_text(
        out / "doctor.json", json.dumps({"provenance": prov, **result.to_json()}, indent=2, default=float)
    )
    return out / "doctor.html"


def provenance() -> dict[str, str]:
    """The findings page's provenance block (``nbkit.workbook.report.provenance``: commit, machine, date, versions)
    with the CPU's half-precision flags and the GEMM policy ``auto`` picks here (the doctor has no profile)."""
    prov = {k: v for k, v in report.provenance("").items() if k != "profile"}
    return {
        **prov,
        "cpu half flags": ", ".join(gemm.half_flags()) or "none",
        "gemm policy (auto)": str(gemm.resolve("auto")),
    }


def setup_from_args(args) -> lints.Setup:
    """The ``nbkit.offline.lints.Setup`` of the command line: ``--config``'s RLConfig, then the setup flags over it."""
    fields = {"target_length": args.target_length}
    if args.config:
        fields = {**asdict(lints.Setup.from_rlconfig(RLConfig(**read_config_file(args.config)))), **fields}
    for name in "train_dtype engine_dtype fp32_lm_head temperature top_p top_k logprobs_mode is_level is_cap".split():
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.engine_dtype is not None:
        fields["engine_dtype"] = None if args.engine_dtype == "auto" else args.engine_dtype
        fields["engine_dtype_source"] = "--engine-dtype"
    if fields.get("engine_dtype") is None and "engine_dtype_source" not in fields:  # not described: as documented,
        fields["engine_dtype"] = fields.get("train_dtype", lints.Setup.train_dtype)  # the engine in the trainer's
        fields["engine_dtype_source"] = "not set: the same as the trainer (--engine-dtype auto: the checkpoint's)"
    fields["pi_filtered"] = args.pi_filtered or fields.get("pi_filtered", False)
    fields["router_replay"] = args.router_replay or fields.get("router_replay", False)
    if args.run:
        fields["skip_rate"] = lints.skip_rate(args.run)
    return lints.Setup(**fields)


def main(argv: list[str] | None = None) -> int:
    defaults = DoctorConfig.__dataclass_fields__

    def config_flag(name: str, **kwargs) -> None:
        """A flag for a ``DoctorConfig`` field, its help text the field's own (with its default)."""
        text = defaults[name].metadata["help"].replace("``", "").replace("%", "%%")
        default = defaults[name].default
        shown = " ".join(default) if isinstance(default, tuple) else default
        parser.add_argument(
            "--" + name.replace("_", "-"),
            default=list(default) if isinstance(default, tuple) else default,
            help=text if isinstance(default, bool) else f"{text} (default: {shown})",
            **kwargs,
        )

    parser = Parser(prog="nbkit doctor", description=doctor.__doc__.split("\n\n")[0])
    config_flag("model")
    config_flag("engine", choices=("auto", "hf", "vllm"))
    config_flag("dtypes", nargs="+")
    for name in ("n_prompts", "samples_per_prompt", "max_tokens", "target_length", "seed", "anatomy_sequences"):
        config_flag(name, type=int)
    parser.add_argument("--out", help="report folder (default reports/doctor/<model>)")
    config_flag("anatomy", action="store_true")
    setup = parser.add_argument_group("the run's setup, linted (defaults: FP16 on both sides, no filter, token IS)")
    setup.add_argument("--config", help="an RLConfig YAML/JSON file (nbkit train --config): the setup to lint")
    for flag, kind, what in (
        ("train-dtype", str, "trainer dtype"),
        ("engine-dtype", str, "engine dtype ('auto': as vLLM 'auto' from the checkpoint)"),
        ("fp32-lm-head", str, "none|trainer|engine|both"),
        ("temperature", float, "sampling temperature"),
        ("top-p", float, "nucleus mass"),
        ("top-k", int, "top-k"),
        ("logprobs-mode", str, "raw_logprobs|processed_logprobs"),
        ("is-level", str, "token|sequence"),
        ("is-cap", float, "sequence IS cap C"),
        ("run", str, "an earlier FP16 run folder: its loss-scale skip rate"),
    ):
        setup.add_argument("--" + flag, type=kind, help=what)
    setup.add_argument("--pi-filtered", action="store_true", help="π is scored under the same sampling filter")
    setup.add_argument("--router-replay", action="store_true", help="MoE: the trainer replays the engine's routing")
    args = parser.parse_args(argv)
    try:
        flags = {name: getattr(args, name) for name in defaults if name != "engine_kwargs"}  # every field a flag
        cfg = DoctorConfig(**{**flags, "dtypes": tuple(args.dtypes)})
        run_setup = setup_from_args(args)
        if args.out is not None and not args.out.strip():
            raise ValueError(f"--out {args.out!r}: name the doctor's report folder")
        out = Path(args.out) if args.out else REPORTS / "doctor" / Path(cfg.model).name
        check_out_name(out, "doctor folder")  # UTF-8, not a symlink to nowhere
        outputs.check_listed(out, doctor.KIND, "doctor folder")  # before any model loads or sample is drawn
        _, capped = doctor.fit_context(cfg)  # the model folder checked, the responses fitted to its context
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as exc:
        parser.error(str(exc))
    if capped:
        print(f"[nbkit] doctor: {capped}", flush=True)
    result = doctor.diagnose(cfg, progress=True, setup=run_setup)
    print(result.text())
    page = write_html(result, out)
    print(f"[nbkit] doctor report: {page}")
    return 0
