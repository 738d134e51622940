"""LoRA rank limits read without weights: the limit is the widest adapted layer's min(in, out), the layers are the
ones peft's ``all-linear`` adapts (MoE expert and router weights included, and never wider), a rank up to the limit
is accepted and one above refused, naming both."""

import pytest
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from nbkit.rl import lora
from nbkit.runtime.paths import CACHE


def peft_limit(model) -> tuple[set, int]:
    """(names of the nn.Linear modules peft adapts, the largest min(in, out) over everything it adapts: modules
    and, for MoE models, target parameters, whose last two dims are (out, in) per expert)."""
    adapted = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
    config = adapted.peft_config["default"]
    base = adapted.get_base_model()
    modules = {n for n, m in base.named_modules() if n.split(".")[-1] in (config.target_modules or ())}
    widths = [
        min(m.in_features, m.out_features)
        for n, m in base.named_modules()
        if n in modules and hasattr(m, "in_features")
    ]
    widths += [
        min(p.shape[-2:])
        for n, p in base.named_parameters()
        if any(n.endswith(t) or n.endswith(t + ".weight") for t in (config.target_parameters or ()))
    ]
    return {n for n in modules if hasattr(base.get_submodule(n), "in_features")}, max(widths)


@pytest.mark.parametrize("ref", ["tiny-arith", "tiny-moe-arith"])
def test_the_limit_is_the_widest_layer_peft_adapts(ref):
    config = lora.model_config(ref)
    counted = lora.target_layers(AutoModelForCausalLM.from_config(config))
    modules, widest = peft_limit(AutoModelForCausalLM.from_config(config))
    assert set(counted) == modules and "lm_head" not in counted
    assert lora.max_rank(config)[0] == widest == 128


def test_a_rank_up_to_the_limit_is_accepted_and_one_above_refused():
    lora.check_rank(128, "tiny-arith")
    with pytest.raises(
        ValueError,
        match=r"lora_rank=129 .* no adapter of this model has rank above 128; "
        r"choose lora_rank in \[1, 128\]",
    ):
        lora.check_rank(129, "tiny-arith")
    lora.check_rank(10**6, "someone/not-in-the-cache")  # unreadable here: left to the model load, no network


def test_smollm2s_known_shape_gives_the_converted_checkpoints_limit():
    converted = CACHE / "models" / "smollm2-135m"
    if not (converted / "config.json").is_file():
        pytest.skip("smollm2-135m not converted on this machine")
    shape = dict(lora.KNOWN_SHAPES["smollm2-135m"])
    known = AutoConfig.for_model(shape.pop("model_type"), **shape)
    assert (
        lora.max_rank(known)
        == lora.max_rank(AutoConfig.from_pretrained(converted))
        == (576, "model.layers.0.self_attn.q_proj", (576, 576))
    )
