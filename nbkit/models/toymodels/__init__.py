"""The project's toy models, trained by the workbook itself because no model can be downloaded here: ``tiny_arith`` (a
1 M-parameter Qwen2 that adds with a scratchpad), ``tiny_long`` (the same on long answers, for the length regimes)
and ``tiny_moe`` (tiny-arith's recipe on a Qwen3-MoE, for routing flips). Each module builds its model's SFT data,
trains it and writes ``data/models/<name>``; ``nbkit.models.models`` loads them by name.
"""
