"""Specification of ``nbkit.models.models.load``: refs and dtypes are checked before anything loads, and a model
loaded in a dtype really holds its weights in that dtype."""

from __future__ import annotations

import pytest
import torch

from nbkit.models import models


def test_unknown_ref_fails_before_loading_and_lists_the_choices(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded for an invalid ref")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_loading)
    with pytest.raises(ValueError) as err:
        models.load("no-such-model", "fp32")
    for choice in models.BUILTIN_MODELS:
        assert choice in str(err.value)


@pytest.mark.parametrize("bad", ["fp8", "float16", "int8", ""])
def test_bad_dtype_fails_before_loading_and_lists_the_choices(monkeypatch, bad):
    def no_resolving(*args, **kwargs):
        raise AssertionError("the model was resolved before the dtype was checked")

    monkeypatch.setattr(models, "resolve", no_resolving)
    with pytest.raises(ValueError) as err:
        models.load("tiny-arith", bad)
    for choice in ("fp32", "bf16", "fp16"):
        assert choice in str(err.value)


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        models.load(tmp_path, "fp32")


@pytest.mark.parametrize("dtype,expected", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_tiny_arith_loads_with_every_parameter_in_the_requested_dtype(dtype, expected):
    model, tok = models.load("tiny-arith", dtype)
    assert {p.dtype for p in model.parameters()} == {expected}
    assert not model.training
    assert tok.pad_token_id is not None and tok.eos_token_id is not None
    ids = torch.tensor([tok.encode("347+058=", add_special_tokens=False)])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits
    assert logits.dtype == expected  # the forward really computes in that dtype
    assert torch.isfinite(logits.float()).all()


def test_dtype_names_round_trip():
    for name, dt in models.DTYPES.items():
        assert models.torch_dtype(name) is dt
        assert models.dtype_name(dt) == name


@pytest.mark.slow
def test_the_converted_smollm2_is_reused_while_its_gguf_is_unchanged_and_converted_again_when_not(
    tmp_path, monkeypatch
):
    """The cache's rule. The project's own checkpoint comes from the real conversion (every SmolLM2 test loads it);
    the copy's conversion again is recorded instead of run (it takes ~20 s of one core)."""
    import json
    import shutil

    project = models._smollm2_checkpoint()  # the project's cache (converted once per machine)
    record = json.loads((project / "nbkit_source.json").read_text())
    assert len(record["sha256"]) == 64 and record["bytes"] > 0  # the GGUF it came from, by content
    assert (project / "model.safetensors").stat().st_size > 4 * 100e6  # 135 M parameters in fp32
    monkeypatch.setattr(models, "CACHE", tmp_path)
    converted = []

    def convert(gguf, out):
        converted.append(gguf)
        out.mkdir()
        (out / "model.safetensors").write_bytes(b"converted again")

    monkeypatch.setattr(models, "_convert_gguf", convert)
    copy = shutil.copytree(project, tmp_path / "models" / "smollm2-135m")
    weights = copy / "model.safetensors"
    assert models._smollm2_checkpoint() == copy and not converted  # reused as it is
    (copy / "nbkit_source.json").write_text(json.dumps({**record, "sha256": "0" * 64}))  # another GGUF's copy
    assert models._smollm2_checkpoint() == copy
    assert [g.name for g in converted] == [record["gguf"]] and weights.read_bytes() == b"converted again"
    assert json.loads((copy / "nbkit_source.json").read_text())["sha256"] == record["sha256"]
    assert not list(copy.parent.glob("*.partial-*"))  # the temporary folder was renamed into place
