"""The dynamic_range template family's kernel half (dynamic_range.cuh): min and max of a whole float32 tensor in
one launch and the scalars computed from them, rendered by render.py; one route for every shape."""
from __future__ import annotations

from .. import KernelFamily
from ....warehouse.families.dynamic_range import DYNAMIC_RANGE
from .render import ENTRY, render_dynamic_range

KERNEL = KernelFamily(DYNAMIC_RANGE, render_dynamic_range, entries=(ENTRY,))
