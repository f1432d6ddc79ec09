"""What every job's run is made of: its log, evaluation and checkpoint schedule (`run`), atomic
checkpoints (`checkpoint`), the optimizer and learning-rate schedule (`optim`), the allocator
settings (`allocator`), and the policy with the copies that serve it (`policy`)."""
