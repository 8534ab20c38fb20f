"""The customers topic's Avro schemas: two versions a producer wrote over time, and the one the pipeline reads
with. Version 2 added `tier` with a default, so records written with version 1 read as tier "standard"."""

from __future__ import annotations

import json

CUSTOMER_V1 = json.dumps({
    "type": "record", "name": "Customer", "namespace": "example",
    "fields": [{"name": "customer_id", "type": "string"},
               {"name": "name", "type": "string"},
               {"name": "email", "type": ["null", "string"], "default": None}]})

CUSTOMER_V2 = json.dumps({
    "type": "record", "name": "Customer", "namespace": "example",
    "fields": [{"name": "customer_id", "type": "string"},
               {"name": "name", "type": "string"},
               {"name": "email", "type": ["null", "string"], "default": None},
               {"name": "tier", "type": "string", "default": "standard"}]})

# The ids a Schema Registry gave the two versions (here: the pipeline's own map, docs/formats.md).
WRITER_SCHEMAS = {1: CUSTOMER_V1, 2: CUSTOMER_V2}
READER_SCHEMA = CUSTOMER_V2
