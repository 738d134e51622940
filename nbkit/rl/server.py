"""Rollouts from a running vLLM server (TRL's server mode), refused when the server serves another dtype.

TRL's ``trl vllm-serve`` / ``vllm serve`` take ``--dtype`` (default ``auto``), and TRL's trainer never compares it
with the trainer's: a run asked for FP16 rollouts could silently sample from a BF16 server, i.e. measure and
correct the very mismatch the workbook studies against the wrong μ. ``ServerGeneration`` is TRL's own server-mode
``VLLMGeneration`` (its client, its NCCL weight sync: GPU only) with one addition: before the weight-sync group is
opened, the main process asks the server which dtype it resolved (``/server_info``, vLLM's dev endpoint that
TRL's client already requires) and every process stops when it differs from the requested rollout dtype, or when
the server reports log-probs before temperature / top-p (``--logprobs-mode`` other than ``processed_logprobs``).

One server serves run after run (``nbkit plan`` starts it once per precision). vLLM 0.32's worker replaces its NCCL
weight-transfer group on every ``/init_weight_transfer_engine`` without closing the one before it, and TRL's client
drops its end without destroying it. The server therefore runs with the worker extension
``nbkit.runtime.vllm_worker.WeightTransferReset`` (``--worker-extension-cls``, which ``nbkit plan`` passes): before a
run opens its group, and again when it closes, the trainer asks every worker (vLLM's dev ``/collective_rpc``) to end
an update a lost trainer left open and destroy the group it holds; ``close`` destroys the trainer's end too. A server
started without the extension is refused, naming the flag.

Every request to the server has a timeout (TRL's client sets none): ``CONTROL_TIMEOUT`` for its info and the group's
opening, closing and update boundaries, ``TRANSFER_TIMEOUT`` for generation and a weight transfer. A server whose
workers are stuck in a weight sync a crashed run started then fails the next request in bounded time, with the
restart named, instead of hanging the trainer and its cleanup. The weight-sync group's port is found free when the
run starts (TRL's default is the fixed 51216).
"""

from __future__ import annotations

import time

import requests
from trl.generation.vllm_client import VLLMClient
from trl.generation.vllm_generation import VLLMGeneration

from nbkit.precision.dtypes import FROM_VLLM as SERVER_DTYPES
from nbkit.precision.dtypes import VLLM_NAMES
from nbkit.runtime.pool import free_port
from nbkit.runtime.vllm_worker import RESET_EXTENSION, RESET_METHOD

CONTROL_TIMEOUT = 60.0
"""Seconds a control request may take (server info, the weight-sync group's opening and closing, an update's start
and finish): a healthy server answers in well under a second."""
TRANSFER_TIMEOUT = 1800.0
"""Seconds a generation request or a weight transfer may take (a gpu-profile rollout batch is minutes)."""
TRANSFER_PATHS = ("/v1/", "/inference/", "/update_weights", "/init_weight_transfer_engine")
"""Requests that last as long as their work: generation, and the transfers the workers block in until the trainer
has sent (``/init_weight_transfer_engine``'s rendezvous, ``/update_weights``' broadcast)."""
RESTART = "stop the vLLM server and start it again (the command nbkit plan prints) before the next run"


class WeightSyncError(RuntimeError):
    """A server that cannot close its weight-transfer group, or does not answer in time."""


def request_timeout(url: str) -> float:
    """The timeout of a request to ``url``: ``TRANSFER_TIMEOUT`` for ``TRANSFER_PATHS``, else ``CONTROL_TIMEOUT``."""
    return TRANSFER_TIMEOUT if any(path in url for path in TRANSFER_PATHS) else CONTROL_TIMEOUT


class TimedClient(VLLMClient):
    """TRL's ``VLLMClient`` with a timeout on every request (``request_timeout``), its ``/health`` wait included, and
    a request that timed out not sent again (TRL retries reads 5 times: behind a stuck one, each would queue)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for adapter in self.session.adapters.values():
            adapter.max_retries = adapter.max_retries.new(read=0)

    @property
    def session(self) -> requests.Session:
        return self.__dict__["session"]

    @session.setter
    def session(self, session: requests.Session) -> None:  # TRL builds its session in __init__: time it there
        send = session.request
        session.request = lambda method, url, **kw: send(method, url, **{"timeout": request_timeout(url), **kw})
        self.__dict__["session"] = session

    def check_server(self, total_timeout: float = 0.0, retry_interval: float = 2.0) -> None:
        """Wait up to ``total_timeout`` seconds for ``/health`` to answer 200 (TRL's waits without a timeout)."""
        deadline = time.monotonic() + total_timeout
        while True:
            try:
                if self.session.get(f"{self.base_url}/health").status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"the vLLM server at {self.base_url} did not answer /health in {total_timeout:g} s"
                )
            time.sleep(retry_interval)


class ServerDtypeError(RuntimeError):
    """The vLLM server serves another dtype than the requested rollout dtype, or reports μ before sampling processing."""


def served_dtype(server_info: dict) -> str:
    """The workbook name (fp32 | bf16 | fp16) of the dtype in a ``VLLMClient.get_server_info()`` answer."""
    try:
        raw = server_info["model_config"]["dtype"]
    except (KeyError, TypeError) as exc:
        raise ServerDtypeError(
            f"the server's /server_info has no model_config.dtype (got keys "
            f"{sorted(server_info) if isinstance(server_info, dict) else type(server_info)})"
        ) from exc
    name = str(raw).removeprefix("torch.")
    if name not in SERVER_DTYPES:
        raise ServerDtypeError(f"the server serves dtype {raw!r}, which is none of {sorted(SERVER_DTYPES)}")
    return SERVER_DTYPES[name]


def check_server_dtype(client, requested: str) -> str:
    """Ask ``client`` (TRL's ``VLLMClient`` or anything with ``get_server_info()``) for its dtype; raise
    ``ServerDtypeError`` naming both when it is not ``requested``. Returns the served dtype."""
    served = served_dtype(client.get_server_info())
    if served != requested:
        raise ServerDtypeError(
            f"requested {requested} rollouts but the vLLM server at {getattr(client, 'base_url', '?')} serves "
            f"{served}: restart it with --dtype {VLLM_NAMES[requested]} (or set rollout_dtype={served!r})"
        )
    return served


def check_server_logprobs(client) -> None:
    """μ must be the distribution actually sampled from (after temperature / top-p / top-k), as the colocated
    engines report it: refuse a server started without ``--logprobs-mode processed_logprobs`` (TRL only warns)."""
    mode = client.get_server_info().get("model_config", {}).get("logprobs_mode")
    if mode != "processed_logprobs":
        raise ServerDtypeError(
            f"the vLLM server at {getattr(client, 'base_url', '?')} reports logprobs_mode "
            f"{mode!r}: restart it with --logprobs-mode processed_logprobs (TRL's vllm-serve does)"
        )


def check_server_context(client, needed: int | None) -> None:
    """The server's ``max_model_len`` must hold the run's longest prompt + ``max_completion_length`` (``needed``): vLLM ends a
    request at ``max_model_len`` as an ordinary "length" finish, so a shorter one would cut answers silently."""
    if needed is None:
        return
    served = client.get_server_info().get("model_config", {}).get("max_model_len")
    if not isinstance(served, int):
        raise ServerDtypeError(
            f"the vLLM server at {getattr(client, 'base_url', '?')} reports no max_model_len "
            f"(got {served!r}): cannot check it holds the run's {needed} tokens"
        )
    if served < needed:
        raise ServerDtypeError(
            f"the vLLM server at {getattr(client, 'base_url', '?')} has max_model_len {served} "
            f"but the run needs {needed} (longest prompt + max_completion_length): restart it with "
            f"--max-model-len {needed} or more"
        )


class ServerGeneration(VLLMGeneration):
    """TRL's server-mode generation with the dtype check, timings and the ``EngineGeneration`` bookkeeping
    interface (``engine_dtype``, ``engine_head_dtype``, ``engine_gemm``, ``take_seconds``, ``close``) the workbook
    trainer calls."""

    def __init__(self, *, dtype: str, server_base_url: str, server_timeout: float = 240.0, **trl_kwargs):
        for colocate_only in (
            "engine",
            "model_ref",
            "seed",
            "kv_cache_gib",
            "gemm_policy",
            "hf_batch_size",
            "max_num_batched_tokens",
            "block_size",
        ):
            trl_kwargs.pop(colocate_only, None)  # the server owns its engine
        trl_kwargs.setdefault("group_port", free_port())  # never TRL's fixed 51216: two runs on one node
        self.rollout_dtype, self.served = dtype, None
        self.seconds = {"generate": 0.0, "sync": 0.0}
        self.length_hits = [0, 0]
        super().__init__(mode="server", server_base_url=server_base_url, server_timeout=server_timeout, **trl_kwargs)

    def _init_vllm(self) -> None:
        """Connect (main process), check the dtype on every process, then open TRL's weight-sync group."""
        from accelerate.utils import broadcast_object_list

        acc = self.accelerator
        verdict = [None]
        if acc.is_main_process:
            self.vllm_client = TimedClient(
                base_url=self.server_base_url, group_port=self.group_port, connection_timeout=self.server_timeout
            )
            try:
                served = check_server_dtype(self.vllm_client, self.rollout_dtype)
                check_server_logprobs(self.vllm_client)
                check_server_context(self.vllm_client, getattr(self, "max_model_length", None))
                check_server_reset(self.vllm_client)
                verdict = [("ok", served)]
            except (ServerDtypeError, WeightSyncError) as exc:
                verdict = [("error", str(exc))]
        if acc.num_processes > 1:
            broadcast_object_list(verdict, from_process=0)
        status, value = verdict[0]
        if status == "error":
            raise ServerDtypeError(value)
        self.served = value
        if acc.is_main_process:
            close_server_groups(self.vllm_client)  # a previous run's group, if this server served one
            self.vllm_client.init_communicator(device=acc.device)
        acc.wait_for_everyone()  # TRL's closing barrier (DeepSpeed hangs at initialisation without it)

    def sync_weights(self) -> None:
        start = time.perf_counter()
        super().sync_weights()
        self.seconds["sync"] += time.perf_counter() - start

    def generate(self, *args, **kwargs):
        start = time.perf_counter()
        out = super().generate(*args, **kwargs)
        self.seconds["generate"] += time.perf_counter() - start
        eos = getattr(self.processing_class, "eos_token_id", None)
        self.length_hits[0] += sum(
            len(ids) >= self.max_completion_length and (not ids or ids[-1] != eos) for ids in out[1]
        )  # reached max_completion_length without a stop token
        self.length_hits[1] += len(out[1])
        return out

    def take_length_hits(self) -> tuple[int, int]:
        """(answers that reached ``max_completion_length``, answers) on this process since the last call."""
        out, self.length_hits = tuple(self.length_hits), [0, 0]
        return out

    def engine_dtype(self) -> str:
        """The dtype the server reported at start-up (checked equal to the request then)."""
        return self.served

    def engine_head_dtype(self) -> str:
        """``n/a``: the server's LM head is not observable from the trainer."""
        return "n/a"

    def engine_gemm(self) -> str:
        """``vllm n/a``: the server's kernels are its own and not observable from the trainer."""
        return "vllm n/a"

    def take_seconds(self) -> dict:
        """Generate and sync time since the last call (then reset)."""
        out, self.seconds = self.seconds, {"generate": 0.0, "sync": 0.0}
        return out

    def close(self) -> None:
        """Close the weight-sync group on both ends (the server keeps running, ready for the next run)."""
        client = getattr(self, "vllm_client", None)
        if client is not None and getattr(client, "communicator", None) is not None:
            try:
                close_server_groups(client)
            finally:
                close_trainer_group(client)


def check_server_reset(client) -> None:
    """Refuse a server whose workers cannot close a weight-transfer group (started without ``RESET_EXTENSION``)."""
    parallel = client.get_server_info().get("parallel_config") or {}
    if parallel.get("worker_extension_cls") != RESET_EXTENSION:
        raise WeightSyncError(
            f"the vLLM server at {getattr(client, 'base_url', '?')} runs worker extension "
            f"{parallel.get('worker_extension_cls')!r}, so a second run would leave the first run's NCCL "
            f"weight-transfer group open: restart it with --worker-extension-cls {RESET_EXTENSION} (nbkit plan "
            f"prints it)"
        )


def close_server_groups(client) -> list:
    """Ask every worker of the server to end an update left open and destroy its weight-transfer group
    (``WeightTransferReset``), within ``CONTROL_TIMEOUT``; returns their answers (True where a group was closed)."""
    try:
        response = client.session.post(f"{client.base_url}/collective_rpc", json={"method": RESET_METHOD})
    except requests.RequestException as exc:  # a read timeout, once retries are spent, arrives as ConnectionError
        raise WeightSyncError(
            f"the vLLM server at {client.base_url} did not close its weight-transfer group within "
            f"{CONTROL_TIMEOUT:g} s ({type(exc).__name__}; its workers may wait in a weight sync a stopped run "
            f"left): {RESTART}"
        ) from None
    if response.status_code != 200:
        raise WeightSyncError(
            f"the vLLM server at {client.base_url} could not close its weight-transfer group "
            f"({response.status_code}: {response.text[:200]}): {RESTART}"
        )
    return response.json().get("results", []) if response.content else []


def close_trainer_group(client) -> None:
    """Destroy the trainer's end of the weight-transfer group (vLLM's ``PyNcclCommunicator.destroy``), then let
    TRL's client drop it (TRL only drops it)."""
    communicator = getattr(client, "communicator", None)
    if communicator is None:
        return
    destroy = getattr(communicator, "destroy", None)
    if destroy is not None:
        destroy()
    client.close_communicator()
