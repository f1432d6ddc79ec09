"""Load the user's own code a config names: 'module:attr' (an absolute dotted module) or
'path/to/file.py:attr'. Verifiers (`reward.verifier`) and environments (`environment.name`)
are plugged in this way, without a registry to add to."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from rlvr.errors import ConfigError


def load_attribute(spec: str, field: str, what: str) -> Any:
    """The callable a user spec names: 'module:name' (an absolute dotted module) or
    'path/file.py:name'; a one-line ConfigError naming `field` otherwise."""
    target, name = spec.rsplit(":", 1)
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ConfigError(f"{field}: file {str(path)!r} not found")
        module_spec = importlib.util.spec_from_file_location(f"rlvr_user_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        if (
            not target
            or target.startswith(".")
            or not all(part.isidentifier() for part in target.split("."))
        ):
            raise ConfigError(
                f"{field}: {spec!r}: expected 'module:{what}' with an absolute dotted "
                f"module name, or 'file.py:{what}'"
            )
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            message = " ".join(str(e).split())
            raise ConfigError(f"{field}: cannot import module {target!r}: {message}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"{field}: {target!r} has no {what} {name!r}")
    return fn
