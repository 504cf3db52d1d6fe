"""Markdown tables and PNG charts rendered from result JSON alone, and the goals they are read against."""
