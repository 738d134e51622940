"""The vLLM server's worker extension (``--worker-extension-cls``, which ``nbkit plan`` passes): every worker of the
server imports this module, so it imports nothing (no torch, no ``nbkit.rl``).

Why ours and not vLLM's ``POST /shutdown_weight_transfer_engine`` alone: vLLM 0.32's worker refuses that while an
update is marked active, and a trainer that crashed or was stopped during a weight sync leaves it marked, so the next
run's first update is refused too; ``close_weight_transfer`` ends such an update first, then calls vLLM's own.
"""

RESET_EXTENSION = "nbkit.runtime.vllm_worker.WeightTransferReset"
"""The server's ``--worker-extension-cls``: adds ``close_weight_transfer`` to every vLLM worker."""
RESET_METHOD = "close_weight_transfer"


class WeightTransferReset:
    """vLLM worker extension: one method that leaves the worker ready for the next run's weight-transfer group."""

    def close_weight_transfer(self) -> bool:
        """End an update a lost trainer left open (vLLM's ``finish_weight_update``; the worker's "update active" flag
        is cleared even when that fails, and the failure is reported), then destroy the worker's NCCL group with
        vLLM's ``shutdown_weight_transfer_engine``. True when there was a group to destroy."""
        if getattr(self, "_weight_update_active", False):
            try:
                self.finish_weight_update()
            finally:
                self._weight_update_active = False
        engine = getattr(self, "weight_transfer_engine", None)
        if engine is None or getattr(engine, "model_update_group", None) is None:
            return False
        self.shutdown_weight_transfer_engine()
        return True
