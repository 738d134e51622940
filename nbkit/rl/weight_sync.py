"""The weight-transfer group between a trainer and a vLLM server that serves run after run (``nbkit.rl.server``).

vLLM 0.32's worker replaces its NCCL weight-transfer group on every ``/init_weight_transfer_engine`` without closing
the one before it, and TRL's client drops its end without destroying it. ``WeightTransferReset`` is the worker
extension the server runs (``--worker-extension-cls``, which ``nbkit plan`` passes); the trainer calls
``close_server_groups`` before it opens a group and when it closes one, and ``close_trainer_group`` for its own end.
No TRL or vLLM import here: the vLLM worker imports this module, and ``nbkit plan`` reads ``RESET_EXTENSION``.
"""

from __future__ import annotations


class WeightSyncError(RuntimeError):
    """A server that cannot close its weight-transfer group, or a close that failed."""


RESET_EXTENSION = "nbkit.rl.weight_sync.WeightTransferReset"
"""The server's ``--worker-extension-cls``: adds ``close_weight_transfer`` to every vLLM worker."""
RESET_METHOD = "close_weight_transfer"


class WeightTransferReset:
    """vLLM worker extension (``--worker-extension-cls nbkit.rl.weight_sync.WeightTransferReset``): one method that
    destroys the worker's NCCL weight-transfer group, if it holds one, so the next run's group replaces nothing
    still open."""

    def close_weight_transfer(self) -> bool:
        """Destroy this worker's weight-transfer group (vLLM's engine ``shutdown``: ``PyNcclCommunicator.destroy``
        and the reference dropped); True when there was one."""
        engine = getattr(self, "weight_transfer_engine", None)
        if engine is None or getattr(engine, "model_update_group", None) is None:
            return False
        engine.shutdown()
        return True


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
    """Ask every worker of the server to destroy its weight-transfer group (``WeightTransferReset``); returns their
    answers (True where a group was closed)."""
    response = client.session.post(f"{client.base_url}/collective_rpc", json={"method": RESET_METHOD})
    if response.status_code != 200:
        raise WeightSyncError(
            f"the vLLM server at {client.base_url} could not close its weight-transfer group "
            f"({response.status_code}: {response.text[:200]})"
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
