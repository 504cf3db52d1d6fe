"""The formats shared with the C launcher (plus_ep/native): the launch plan (plan, read by plan.c)
and the image pack (pack, read by pack.c)."""
