"""Procedurally generated tasks with verifiable answers."""

from rlvr.data.tasks.addition import AdditionTask

__all__ = ["AdditionTask"]
