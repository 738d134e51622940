"""The models: loaders by name, the dtype table, MoE routing records, and the toy models the project trains."""
