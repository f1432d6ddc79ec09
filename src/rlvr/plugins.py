"""Load the user's own code a config names: 'module:attr' (an absolute dotted module) or
'path/to/file.py:attr'. Verifiers (`reward.verifier`) and environments (`environment.name`)
are plugged in this way, without a registry to add to.

A file is executed with its own directory first on `sys.path`, so it may import a module beside
it (`import helpers`) as a script would, without PYTHONPATH; the entry is removed again once the
file has loaded. Modules it imported stay imported (`sys.modules`), as any import does; an import
run later, inside a function, finds only those."""

from __future__ import annotations

import importlib
import importlib.util
import sys
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
        folder = str(path.resolve().parent)
        sys.path.insert(0, folder)
        try:
            module_spec.loader.exec_module(module)  # type: ignore[union-attr]
        except ImportError as e:
            message = " ".join(str(e).split())
            raise ConfigError(f"{field}: {str(path)!r} cannot import: {message}") from None
        finally:
            if folder in sys.path:
                sys.path.remove(folder)  # the first one: ours, unless the file moved it
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
