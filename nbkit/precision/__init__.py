"""Number formats and their arithmetic: rollout formats and the dial, GEMM policies, the vLLM GEMM plugin, the FP32 LM head."""
