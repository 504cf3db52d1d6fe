"""The axis_softmax template family's kernel half (axis_softmax.cuh): softmax or log-softmax over a middle axis,
one thread per column, rendered by render.py; one route for every shape."""
from __future__ import annotations

from .. import KernelFamily
from ....warehouse.families.axis_softmax import AXIS_SOFTMAX
from .render import ENTRY, render_axis_softmax

KERNEL = KernelFamily(AXIS_SOFTMAX, render_axis_softmax, entries=(ENTRY,))
