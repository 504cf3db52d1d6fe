"""Loading a warehouse: the built-in patterns (warehouse/families/, registered on import), the
entry-point plugins (group ``plus_ep.warehouse``) and the pattern files of a folder
(``PLUS_EP_WAREHOUSE``). Apart from registry.py so that the registry never imports the patterns
that import it."""
from __future__ import annotations

import importlib.util
import logging
import pathlib

from .. import config
from . import families  # noqa: F401  (the built-in families register their patterns on import)
from .registry import _BUILTIN, _TARGET, Warehouse

log = logging.getLogger("plus_ep.warehouse")


_cache: dict = {}


def default_warehouse() -> Warehouse:
    """Built-in patterns, then entry-point plugins, then the files of $PLUS_EP_WAREHOUSE."""
    folder = config.get("PLUS_EP_WAREHOUSE")
    if folder not in _cache:
        _cache[folder] = load_warehouse(folder)
    return _cache[folder]


def load_warehouse(folder=None, plugins: bool = True) -> Warehouse:
    """The built-in patterns (registered when this module imported families/), then entry-point
    plugins, then the files of `folder`."""
    wh = Warehouse(_BUILTIN.patterns)
    if plugins:
        _load_entry_points(wh)
    if folder:
        load_folder(folder, wh)
    return wh


def _load_entry_points(wh: Warehouse):
    from importlib.metadata import entry_points
    for ep in entry_points(group="plus_ep.warehouse"):
        _TARGET.append(wh)
        try:
            obj = ep.load()                   # a module registers with @pattern on import;
            if callable(obj):                 # a function gets the warehouse to add to
                obj(wh)
        except Exception as exc:
            log.warning("warehouse plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)
        finally:
            _TARGET.pop()


def load_folder(folder, wh: Warehouse) -> Warehouse:
    """Import every *.py of `folder`; their @pattern definitions go into `wh`."""
    path = pathlib.Path(folder)
    if not path.is_dir():
        raise ValueError(f"PLUS_EP_WAREHOUSE={folder}: not a directory")
    for file in sorted(path.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"plus_ep_user_patterns.{file.stem}", file)
        _TARGET.append(wh)
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except Exception as exc:
            log.warning("warehouse file %s failed to load: %s", file, exc)
        finally:
            _TARGET.pop()
    return wh
