"""Number formats and their arithmetic: the dtype table (names, spellings, torch dtypes), rollout formats and the dial,
GEMM policies, the vLLM GEMM plugin, the FP32 LM head."""
