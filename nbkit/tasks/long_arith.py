"""Where ``nbkit.studies`` still imports tiny-long's task from (``from nbkit.tasks.long_arith import LongArithConfig``):
the module lives in ``nbkit.models.toymodels.long_arith``, below the toy model trained on it. Delete this file once the
studies import the new path (issue 53: it was moved while ``nbkit/studies`` was being refactored elsewhere)."""

from nbkit.models.toymodels.long_arith import REGIMES, LongArithConfig, make_problems

__all__ = ["REGIMES", "LongArithConfig", "make_problems"]
