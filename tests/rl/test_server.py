"""vLLM server mode: the trainer asks the server which dtype it serves and refuses to train on another one.

A fake client stands in for TRL's ``VLLMClient`` (no server runs on CPU: TRL's weight sync is NCCL-only); the
format of its answer is checked against vLLM's own serialisation of a real ``VllmConfig``.
"""

from types import SimpleNamespace

import pytest

from nbkit.engines import vllm_available
from nbkit.rl import RLConfig
from nbkit.rl.server import ServerDtypeError, ServerGeneration, check_server_dtype, served_dtype


class FakeClient:
    """What ``ServerGeneration`` uses of TRL's ``VLLMClient``, serving ``dtype`` as vLLM reports it."""

    instances: list = []

    def __init__(
        self,
        base_url=None,
        group_port=None,
        connection_timeout=None,
        dtype="torch.bfloat16",
        logprobs_mode="processed_logprobs",
    ):
        self.base_url, self.dtype, self.logprobs_mode, self.communicator = base_url, dtype, logprobs_mode, None
        FakeClient.instances.append(self)

    def get_server_info(self):
        return {"model_config": {"dtype": self.dtype, "logprobs_mode": self.logprobs_mode}}

    def init_communicator(self, device):
        self.communicator = device


@pytest.mark.parametrize("raw,ours", [("torch.bfloat16", "bf16"), ("torch.float16", "fp16"), ("float32", "fp32")])
def test_the_servers_dtype_is_read_in_the_workbooks_names(raw, ours):
    assert served_dtype({"model_config": {"dtype": raw}}) == ours


def test_a_server_in_another_dtype_is_refused_naming_both_and_the_fix():
    with pytest.raises(
        ServerDtypeError,
        match=r"requested fp16 rollouts but the vLLM server at http://gpu0:8000 "
        r"serves bf16: restart it with --dtype float16",
    ):
        check_server_dtype(FakeClient("http://gpu0:8000", dtype="torch.bfloat16"), "fp16")
    assert check_server_dtype(FakeClient("http://gpu0:8000", dtype="torch.float16"), "fp16") == "fp16"


def test_an_answer_without_a_dtype_is_an_error_not_a_pass():
    with pytest.raises(ServerDtypeError, match="no model_config.dtype"):
        served_dtype({"vllm_config": {}})
    with pytest.raises(ServerDtypeError, match="serves dtype 'torch.float8_e4m3fn'"):
        served_dtype({"model_config": {"dtype": "torch.float8_e4m3fn"}})


def _generation(monkeypatch, served: str, requested: str, logprobs_mode="processed_logprobs") -> ServerGeneration:
    """``ServerGeneration._init_vllm`` on one process with the fake client (TRL's constructor is not run)."""
    monkeypatch.setattr(
        "trl.generation.vllm_client.VLLMClient",
        lambda **kw: FakeClient(**kw, dtype=served, logprobs_mode=logprobs_mode),
    )
    gen = ServerGeneration.__new__(ServerGeneration)
    gen.accelerator = SimpleNamespace(
        is_main_process=True, num_processes=1, device="cuda:0", wait_for_everyone=lambda: None
    )
    gen.server_base_url, gen.group_port, gen.server_timeout = "http://gpu0:8000", 51216, 1.0
    gen.rollout_dtype, gen.served = requested, None
    gen._init_vllm()
    return gen


def test_the_trainer_side_refuses_before_opening_the_weight_sync_group(monkeypatch):
    FakeClient.instances.clear()
    with pytest.raises(ServerDtypeError, match="requested fp16 rollouts .* serves bf16"):
        _generation(monkeypatch, "torch.bfloat16", "fp16")
    assert FakeClient.instances[-1].communicator is None  # NCCL group never opened


def test_a_server_reporting_raw_logprobs_is_refused(monkeypatch):
    FakeClient.instances.clear()
    with pytest.raises(ServerDtypeError, match="logprobs_mode 'raw_logprobs': restart it with --logprobs-mode"):
        _generation(monkeypatch, "torch.float16", "fp16", logprobs_mode="raw_logprobs")
    assert FakeClient.instances[-1].communicator is None


def test_a_matching_server_is_used_and_reported_as_the_engine_dtype(monkeypatch):
    gen = _generation(monkeypatch, "torch.float16", "fp16")
    assert gen.engine_dtype() == "fp16" and gen.vllm_client.communicator == "cuda:0"
    # what the trainer's audit cannot see on a server is said to be unknown, not left out
    assert (gen.engine_head_dtype(), gen.engine_gemm()) == ("n/a", "vllm n/a")


def test_server_mode_is_configured_with_the_vllm_engine_only():
    assert RLConfig(rollout_engine="vllm", vllm_mode="server").vllm_mode == "server"
    with pytest.raises(ValueError, match="vllm_mode='server' needs rollout_engine='vllm'"):
        RLConfig(rollout_engine="hf", vllm_mode="server")


@pytest.mark.vllm
@pytest.mark.skipif(not vllm_available(), reason="vLLM not installed")
@pytest.mark.parametrize("vllm_dtype,ours", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_vllms_own_server_info_serialisation_is_what_the_check_reads(vllm_dtype, ours):
    import pydantic
    from vllm.config import ModelConfig, VllmConfig

    from nbkit import models

    config = VllmConfig(
        model_config=ModelConfig(model=models.resolve("tiny-arith"), dtype=vllm_dtype, max_model_len=128)
    )
    # exactly what vLLM's /server_info?config_format=json returns as "vllm_config" (and TRL's client hands back)
    info = pydantic.TypeAdapter(VllmConfig).dump_python(config, mode="json", fallback=str)
    assert served_dtype(info) == ours
