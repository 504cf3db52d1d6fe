"""The PlusEP pattern warehouse: +Graph patterns written in ONNX-op vocabulary, in priority order."""
from .loading import default_warehouse, load_folder, load_warehouse
from .registry import Pattern, PatternBuilder, Warehouse, pattern

__all__ = ["Pattern", "PatternBuilder", "Warehouse", "default_warehouse", "load_folder",
           "load_warehouse", "pattern"]
