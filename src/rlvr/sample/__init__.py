"""Rejection sampling (`rlvr sample`): generate, score, filter and write rows for SFT."""
