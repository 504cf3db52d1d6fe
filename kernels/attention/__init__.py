"""The attention template family (templates/attention.cuh): its renderer (render) and config menu (configs)."""
