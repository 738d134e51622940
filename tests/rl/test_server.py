"""vLLM server mode: the trainer asks the server which dtype it serves and refuses to train on another one.

A fake client stands in for TRL's ``VLLMClient`` (no server runs on CPU: TRL's weight sync is NCCL-only); the
format of its answer is checked against vLLM's own serialisation of a real ``VllmConfig``.
"""

from types import SimpleNamespace

import pytest

from nbkit.engines import vllm_available
from nbkit.rl import RLConfig
from nbkit.rl import server as server_mode
from nbkit.rl.server import ServerDtypeError, ServerGeneration, check_server_dtype, served_dtype
from nbkit.runtime.vllm_worker import RESET_EXTENSION, WeightTransferReset


class FakeServer:
    """A vLLM 0.32 server's weight-transfer side as its worker behaves: ``/init_weight_transfer_engine`` replaces
    the worker's group without closing the one it holds; ``/collective_rpc`` runs a worker extension's method."""

    def __init__(self, extension=RESET_EXTENSION):
        self.extension, self.group, self.replaced_open, self.opened = extension, None, 0, 0

    def init_weight_transfer_engine(self):
        if self.group is not None and not self.group["closed"]:
            self.replaced_open += 1  # what vLLM's gpu_worker does: the old NCCL group is left open
        self.group = {"closed": False}
        self.opened += 1

    def collective_rpc(self, method):
        if self.extension != RESET_EXTENSION or method != "close_weight_transfer":
            return SimpleNamespace(status_code=500, text=f"AttributeError: Worker has no attribute {method!r}")
        closed = self.group is not None and not self.group["closed"]
        if closed:
            self.group["closed"] = True
        return SimpleNamespace(status_code=200, content=b"{}", json=lambda: {"results": [closed]})


class FakeCommunicator:
    """The trainer's end of the group (vLLM's ``PyNcclCommunicator``: ``destroy`` aborts the NCCL communicator)."""

    def __init__(self, device):
        self.device, self.destroyed = device, False

    def destroy(self):
        self.destroyed = True


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
        server=None,
    ):
        self.base_url, self.dtype, self.logprobs_mode, self.communicator = base_url, dtype, logprobs_mode, None
        self.server = server or FakeServer()
        self.session = SimpleNamespace(post=lambda url, json: self.server.collective_rpc(json["method"]))
        FakeClient.instances.append(self)

    def get_server_info(self):
        return {
            "model_config": {"dtype": self.dtype, "logprobs_mode": self.logprobs_mode},
            "parallel_config": {"worker_extension_cls": self.server.extension},
        }

    def init_communicator(self, device):
        self.server.init_weight_transfer_engine()
        self.communicator = FakeCommunicator(device)

    def close_communicator(self):  # TRL's: drops its end, destroys nothing
        self.communicator = None


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


def _generation(
    monkeypatch, served: str, requested: str, logprobs_mode="processed_logprobs", server=None
) -> ServerGeneration:
    """``ServerGeneration._init_vllm`` on one process with the fake client (TRL's constructor is not run)."""
    monkeypatch.setattr(
        server_mode,
        "TimedClient",
        lambda **kw: FakeClient(**kw, dtype=served, logprobs_mode=logprobs_mode, server=server),
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
    assert gen.engine_dtype() == "fp16" and gen.vllm_client.communicator.device == "cuda:0"
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

    from nbkit.models import models

    config = VllmConfig(
        model_config=ModelConfig(model=models.resolve("tiny-arith"), dtype=vllm_dtype, max_model_len=128)
    )
    # exactly what vLLM's /server_info?config_format=json returns as "vllm_config" (and TRL's client hands back)
    info = pydantic.TypeAdapter(VllmConfig).dump_python(config, mode="json", fallback=str)
    assert served_dtype(info) == ours


def test_two_runs_against_one_server_never_leave_a_weight_transfer_group_open(monkeypatch):
    """Issue 54, item 5: vLLM's worker replaces its NCCL group on each run's init without closing the one before;
    each run closes both ends when it ends, and closes a group a crashed run left before opening its own."""
    server = FakeServer()
    first = _generation(monkeypatch, "torch.float16", "fp16", server=server)
    trainer_end = first.vllm_client.communicator
    first.close()
    assert server.group["closed"] and trainer_end.destroyed and first.vllm_client.communicator is None
    second = _generation(monkeypatch, "torch.float16", "fp16", server=server)
    assert server.opened == 2 and server.replaced_open == 0
    # a run that ended without close (a crash): the next one closes its group on the server first
    _generation(monkeypatch, "torch.float16", "fp16", server=server)
    assert server.opened == 3 and server.replaced_open == 0
    assert second.vllm_client.communicator is not None  # (its trainer end is its own process's to close)


def test_a_server_without_the_reset_extension_is_refused_before_the_group_opens(monkeypatch):
    server = FakeServer(extension="")
    with pytest.raises(
        ServerDtypeError, match=r"restart it with --worker-extension-cls nbkit.runtime.vllm_worker.WeightTr"
    ):
        _generation(monkeypatch, "torch.float16", "fp16", server=server)
    assert server.opened == 0


@pytest.mark.vllm
@pytest.mark.skipif(not vllm_available(), reason="vLLM not installed")
def test_the_worker_extension_ends_an_update_a_lost_trainer_left_open_then_closes_the_group():
    """Issue 72, item 5: a trainer stopped during a weight sync leaves the worker's "update active" flag set, so
    vLLM's own ``shutdown_weight_transfer_engine`` and the next run's ``start_weight_update`` are refused. The
    extension, on a worker whose methods are vLLM 0.32's own, ends that update and closes the group."""
    from vllm.config import VllmConfig
    from vllm.v1.worker.gpu_worker import Worker

    calls = []

    class Engine:  # vLLM's NCCL engine as the worker drives it (its group: PyNcclCommunicator)
        model_update_group = SimpleNamespace(destroy=lambda: calls.append("destroy"))
        start_weight_update = staticmethod(lambda: calls.append("start"))
        finish_weight_update = staticmethod(lambda: calls.append("finish"))
        reset_weight_update_target = staticmethod(lambda: None)

        def shutdown(self):
            self.model_update_group.destroy()
            self.model_update_group = None

    own = ("shutdown_weight_transfer_engine", "finish_weight_update", "start_weight_update", "_start_weight_update")
    worker = type("Worker", (WeightTransferReset,), {n: getattr(Worker, n) for n in own})()
    worker._check_weight_transfer_engine = lambda: None
    worker.vllm_config, worker.weight_transfer_engine = VllmConfig(), Engine()
    worker.model_runner = SimpleNamespace(reset_lora_state=lambda: None)
    worker._weight_update_active = worker._weight_update_is_draft = False
    worker.start_weight_update()  # the lost trainer's update: started, never finished
    with pytest.raises(RuntimeError, match="during a weight update"):
        worker.shutdown_weight_transfer_engine()
    with pytest.raises(RuntimeError, match="already active"):
        worker.start_weight_update()
    assert worker.close_weight_transfer() is True and calls == ["start", "finish", "destroy"]
    assert worker.close_weight_transfer() is False and calls == ["start", "finish", "destroy"]  # nothing left open
    worker.start_weight_update()  # the next run's first update is accepted
    assert calls[-1] == "start"


def test_the_worker_extension_imports_nothing_heavy():
    """Issue 72, item 8: every vLLM worker resolves ``--worker-extension-cls`` by importing its module; it was in
    ``nbkit.rl``, whose package imports TRL and the whole trainer."""
    import subprocess
    import sys

    module, _, cls = RESET_EXTENSION.rpartition(".")
    code = (
        f"import sys, {module} as m; getattr(m, {cls!r}); "
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'trl', 'transformers', 'vllm') "
        "or n.startswith('nbkit.rl')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_request_to_the_server_has_a_timeout_and_a_stuck_close_names_the_restart(monkeypatch):
    """Issue 72, item 5: TRL's client sends without a timeout, so a server whose workers wait in a sync a crashed
    run started hung the trainer's close, and so the next run. A fake server on 127.0.0.1: generation slower than
    a control timeout still answers; a close that does not answer fails in bounded time, naming the restart."""
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.answer({"data": [{"id": "tiny"}]} if self.path == "/v1/models" else {})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(1.0)  # generation: slower than a control request may take; /collective_rpc: stuck
            if self.path == "/collective_rpc":
                time.sleep(5.0)
            self.answer({"results": []})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setattr(server_mode, "CONTROL_TIMEOUT", 0.3)
    monkeypatch.setattr(server_mode, "TRANSFER_TIMEOUT", 10.0)
    try:
        client = server_mode.TimedClient(base_url=f"http://127.0.0.1:{httpd.server_port}", connection_timeout=5)
        assert client.model == "tiny"
        assert client.session.post(f"{client.base_url}/v1/completions", json={}).status_code == 200
        start = time.monotonic()
        with pytest.raises(server_mode.WeightSyncError, match="did not close its weight-transfer group within 0.3 s"):
            server_mode.close_server_groups(client)
        assert time.monotonic() - start < 3  # one try: a timed-out POST is not sent again behind the stuck one
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "start it again" in server_mode.RESTART


def test_the_plans_server_runs_the_reset_extension():
    from nbkit.cli import plan

    command = plan.server_command(RLConfig(rollout_engine="vllm", vllm_mode="server"), 1, 8000)
    assert command[command.index("--worker-extension-cls") + 1] == RESET_EXTENSION


def test_the_weight_sync_groups_port_is_found_free_at_start_not_trls_fixed_one(monkeypatch):
    """Issue 72, item 7: TRL's default group port is 51216 for every run, so two trainers on one node collide."""
    from trl.generation.vllm_generation import VLLMGeneration

    seen = []
    monkeypatch.setattr(VLLMGeneration, "__init__", lambda self, **kw: seen.append(kw["group_port"]))
    monkeypatch.setattr(server_mode, "free_port", iter([40001, 40002]).__next__)
    for _ in range(2):
        ServerGeneration(dtype="fp16", server_base_url="http://127.0.0.1:8123")
    assert seen == [40001, 40002]
