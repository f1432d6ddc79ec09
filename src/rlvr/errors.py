"""Errors meant for users: one line, naming the file, field or row, and what was expected.

The CLI prints these without a traceback (unless --debug). Anything else is a bug.
"""


class UserError(Exception):
    """Bad input from the user; the message is the whole story."""


class ConfigError(UserError):
    """An invalid configuration key, type or value."""


class DataError(UserError):
    """A malformed dataset file or row."""


class ModelLoadError(UserError):
    """A model or tokenizer that cannot be loaded."""
