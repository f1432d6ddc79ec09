"""Supervised fine-tuning (`rlvr sft`): the loop (`trainer`), its examples and data order
(`data`), its config tree (`config`)."""
