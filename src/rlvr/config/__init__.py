"""The typed configuration tree of a run (`tree`), the machinery that reads, checks and writes
any such tree (`fields`), and the checks across fields (`checks`). Imports only `rlvr.errors`
and `rlvr.algorithms.names`, so reading a config loads no torch."""

from rlvr.config.checks import check_template, config_warnings, validate, validate_model
from rlvr.config.critic import CriticConfig
from rlvr.config.fields import (
    describe_tree,
    dump_yaml,
    leaf_keys,
    load_tree,
    option,
    parse_override,
    read_yaml,
    to_dict,
    type_name,
)
from rlvr.config.tree import (
    AlgorithmConfig,
    CheckpointConfig,
    Config,
    DataConfig,
    DistributedConfig,
    EnvironmentConfig,
    EvalConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    RewardConfig,
    RolloutConfig,
    TrainingConfig,
    all_keys,
    describe,
    load_config,
)

__all__ = [
    "AlgorithmConfig",
    "CheckpointConfig",
    "Config",
    "CriticConfig",
    "DataConfig",
    "DistributedConfig",
    "EnvironmentConfig",
    "EvalConfig",
    "LoggingConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RewardConfig",
    "RolloutConfig",
    "TrainingConfig",
    "option",
    "all_keys",
    "check_template",
    "config_warnings",
    "describe",
    "describe_tree",
    "dump_yaml",
    "leaf_keys",
    "load_config",
    "load_tree",
    "parse_override",
    "read_yaml",
    "to_dict",
    "type_name",
    "validate",
    "validate_model",
]
