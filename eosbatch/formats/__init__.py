"""How a source's keys and values are parsed (the "formats" helper's package; this branch brings only
eosbatch.formats.registry: on merging, keep the formats branch's __init__.py)."""
