"""Offline measurements of the π–μ mismatch, without RL training: the paper's engine dtype × training dtype grid
(``analysis``), its length law (``lengthlaw``), routing flips of an MoE model (``moe_analysis``), the rollout-format
ladder (``ladder``), the mismatch attributed to its sources (``anatomy``), and ``nbkit doctor`` with its lints
(``doctor``, ``lints``), which turn these measurements into a verdict for one model.
"""
