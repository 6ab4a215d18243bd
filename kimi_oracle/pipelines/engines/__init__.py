"""Models of named serving-engine versions' preprocessing, bit-identical to their device paths
on CPU tensors: `sglang_0_5_23` (the built-in candidates `sglang-0.5.23` and its alias `eager`)."""
