"""The forward passes the updates share (RL and SFT alike): the padded and the packed paths
(`paths`), rows packed into token-budget micro-batches (`packing`), block-diagonal attention
without a dense mask (`segment_attention`) and per-token log-probs and entropy (`logprobs`)."""
