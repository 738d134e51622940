"""The ``nbkit`` subcommands outside the runner: the subcommand table and the one-line refusals (``commands``), ``nbkit
train`` (``train``), ``nbkit plan`` (``plan``) and the accelerate-launch checks both use (``launch``).
"""
