"""How a source's keys and values are parsed: one format object per key and per value of a KafkaSource.

    from eosbatch.formats import Avro, Bytes, Json, String

    KafkaSource(topics=["customers"], key=String(),
                value=Avro(reader_schema=Path("customer.avsc"), writer_schemas={1: Path("customer-v1.avsc")}))

Json(schema) parses JSON objects against a Spark DDL schema; Avro(reader_schema, writer_schemas) the Confluent
wire format; String() UTF-8 text; Bytes() nothing (the default of both). docs/formats.md tells more.
"""

from eosbatch.formats.avro_format import Avro
from eosbatch.formats.base import Decoding, Format, Role
from eosbatch.formats.json_format import Json
from eosbatch.formats.plain import Bytes, String
from eosbatch.formats.registry import SchemaRegistry
from eosbatch.formats.schemas import MappedSchemas, WriterSchemas

__all__ = ["Avro", "Bytes", "Decoding", "Format", "Json", "MappedSchemas", "Role", "SchemaRegistry", "String",
           "WriterSchemas"]
