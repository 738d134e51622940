"""The rollout-precision ladder's additions for the predictors study (``nbkit.offline.ladder``): prompts given as
a run's template gives them, and argmax flips between the format's and the FP32 π's full distributions."""

from __future__ import annotations

import numpy as np

from nbkit.offline import ladder


def test_given_prompts_are_sampled_and_argmax_flips_are_recorded_per_response_token():
    prompts = ("265+988=", "12+340=", "507+77=", "99+901=")
    cfg = ladder.LadderConfig(
        formats=("fp32", "e8m1"), prompts=prompts, samples_per_prompt=4, max_tokens=16, n_boot=0, argmax_flips=True
    )
    res = ladder.run_ladder(cfg)
    assert res.prompts == list(prompts) and {r.prompt for r in res.rollouts["fp32"]} == set(prompts)
    for name in cfg.formats:
        assert [f.shape for f in res.flips[name]] == [(len(r),) for r in res.rollouts[name]]
        assert all(f.dtype == bool for f in res.flips[name])
    assert not np.concatenate(res.flips["fp32"]).any(), "FP32 against FP32: no argmax can differ"
    assert np.concatenate(res.flips["e8m1"]).any(), "a 1-bit mantissa moves some argmax"


def test_without_argmax_flips_none_are_computed():
    res = ladder.run_ladder(
        ladder.LadderConfig(formats=("fp32",), n_prompts=2, samples_per_prompt=1, max_tokens=4, n_boot=0)
    )
    assert res.flips == {}
