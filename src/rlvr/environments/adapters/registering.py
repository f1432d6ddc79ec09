"""The user's module that registers a library's environment, named in front of its id:
'MODULE:ENV_ID' or 'path/file.py:ENV_ID' (`environment.name=skyrl-gym:my_envs:multiply`).

Libraries with a registry (skyrl-gym, TextArena) make an environment by id, and a user's own
environment is registered by its module's `register(...)` call at import, as
`gymnasium.make("module:Env-v0")` does. The module is imported once per process: a file is kept
in `sys.modules` under a name made from its resolved path, so a second factory (the held-out
evaluation's, a resumed run's) finds its registrations instead of registering them again, which
both libraries refuse."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from rlvr.errors import ConfigError


def import_registrations(ref: str, library: str) -> str:
    """The environment id of `ref` ('ENV_ID', 'MODULE:ENV_ID' or 'path/file.py:ENV_ID'), its
    module imported first when one is named; a one-line ConfigError naming environment.name
    when the module cannot be imported."""
    target, sep, env_id = ref.rpartition(":")
    if not sep:
        return ref
    where = f"environment.name: {library}:{ref}"
    if not env_id:
        raise ConfigError(f"{where} names no environment id after the module")
    if target.endswith(".py"):
        _import_file(Path(target), where)
        return env_id
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(
            f"{where}: expected {library}:ENV_ID, {library}:MODULE:ENV_ID (an absolute dotted "
            f"module that registers ENV_ID) or {library}:path/file.py:ENV_ID"
        )
    try:
        importlib.import_module(target)
    except ImportError as e:
        raise ConfigError(f"{where}: cannot import module {target!r}: {_one_line(e)}") from None
    except Exception as e:  # its registration failed: a clash of ids, a bug of the module's
        raise ConfigError(f"{where}: importing module {target!r} raised {_one_line(e)}") from e
    return env_id


def _import_file(path: Path, where: str) -> None:
    if not path.is_file():
        raise ConfigError(f"{where}: file {str(path)!r} not found")
    resolved = path.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    name = f"rlvr_user_{resolved.stem}_{digest}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    folder = str(resolved.parent)
    sys.path.insert(0, folder)  # as a script would: it may import a module beside it
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException as e:
        del sys.modules[name]
        if isinstance(e, ImportError):
            raise ConfigError(f"{where}: {str(path)!r} cannot import: {_one_line(e)}") from None
        if isinstance(e, Exception):
            raise ConfigError(f"{where}: {str(path)!r} raised {_one_line(e)}") from e
        raise
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if isinstance(e, ImportError) else f"{type(e).__name__}: {text}"
