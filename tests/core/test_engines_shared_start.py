"""The HF engine's shared start (``HFEngine(share_prefix=True)``): prompts that begin alike (a chat system prompt,
example turns) are prefilled once per batch, with the same samples and log-probs as the row-by-row prefill."""

import pytest

from nbkit.engines import HFEngine, SamplingConfig
from nbkit.engines.hf import shared_start
from nbkit.models.toymodels import tiny_arith

COMMON = "12+34=46\n5+7=12\n"
PROMPTS = [COMMON + q for q in ("3+4=", "25+17=", "8+80=", "101+9=")]


def test_the_shared_start_is_the_longest_common_run_leaving_each_prompt_a_token_of_its_own():
    assert shared_start([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == [1, 2]
    assert shared_start([[1, 2], [1, 2], [1, 2]]) == [1]  # each row keeps its last token
    assert shared_start([[7, 1], [8, 1]]) == []
    assert shared_start([[1, 2, 3]]) == []


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_prompts_sharing_a_start_sample_the_same_tokens_and_log_probs_with_it_prefilled_once(dtype):
    """Under ``fp32-accumulate``, on every CPU: native half kernels pick a kernel per GEMM shape, so there the two
    prefills round differently (``HFEngine.share_prefix``) and the comparison would test the CPU, not the prefill."""
    sampling = SamplingConfig(n=3, max_tokens=6, temperature=1.0, seed=5)
    rows = {
        share: HFEngine("tiny-arith", dtype, progress=False, share_prefix=share, gemm="fp32-accumulate").generate(
            PROMPTS, sampling
        )
        for share in (False, True)
    }
    tok = tiny_arith.build_tokenizer()
    assert len(shared_start([tok.encode(p, add_special_tokens=False) for p in PROMPTS])) == len(COMMON)
    assert [r.token_ids for r in rows[True]] == [r.token_ids for r in rows[False]]
    tol = 1e-5 if dtype == "fp32" else 2e-2
    for a, b in zip(rows[True], rows[False]):
        assert a.logprobs == pytest.approx(b.logprobs, abs=tol)
