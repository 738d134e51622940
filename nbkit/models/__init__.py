"""The models: loaders by name, MoE routing records, and the toy models the project trains (the dtype table they read
sits below them, in ``nbkit.precision``)."""
