"""The PlusEP pattern warehouse: +Graph patterns written in ONNX-op vocabulary, in priority order."""
from .registry import (Pattern, PatternBuilder, Warehouse, default_warehouse, load_folder,
                       load_warehouse, pattern)

__all__ = ["Pattern", "PatternBuilder", "Warehouse", "default_warehouse", "load_folder",
           "load_warehouse", "pattern"]
