"""The compiler's error for a model it cannot read (a leaf: graph.py and index.py both raise it)."""


class ModelError(ValueError):
    """A model the compiler cannot read; the message names the node or value and the fix."""
