"""A replace sink's deletes, as a pipeline declares them (`PostgresSink(deletes=Deletes(...))`): a plain value,
validated when built, and the checks of the sink and output it goes with (docs/deletes.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eosbatch.exceptions import ConfigError
from eosbatch.outputs import JsonValue


@dataclass(frozen=True)
class Deletes:
    """A replace sink's deletes (docs/deletes.md): a tombstone deletes its key (from the record's parsed `key`)
    and publishes a tombstone; a deleted marker keeps older rows out. With `sink.order_by` its order value is
    the header `order_header` (cast to the column's type) or, `order_from_timestamp`, its timestamp."""

    order_header: str | None = None
    order_from_timestamp: bool = False

    def __post_init__(self) -> None:
        if self.order_header is not None and (not isinstance(self.order_header, str) or not self.order_header
                                              or self.order_from_timestamp):
            raise ConfigError("sink.deletes.order_header", f"must be a header name (or None, with "
                              f"order_from_timestamp), got {self.order_header!r}")
        if not isinstance(self.order_from_timestamp, bool):
            raise ConfigError("sink.deletes.order_from_timestamp", f"must be a bool, got {self.order_from_timestamp!r}")


def check_deletes(deletes: object, mode: str, order_by: Sequence[str]) -> None:
    """ConfigError naming the field where a sink of `mode` ordered by `order_by` cannot take `deletes`."""
    if not isinstance(deletes, Deletes):
        raise ConfigError("sink.deletes", f"must be a Deletes or None, got {type(deletes).__name__}")
    if mode != "replace":
        raise ConfigError("sink.deletes", f"only a replace sink deletes; this one is {mode!r}")
    ordered = deletes.order_header is not None or deletes.order_from_timestamp
    if order_by and not ordered:
        raise ConfigError("sink.deletes.order_header", f"sink.order_by {list(order_by)} orders rows, "
                          "so a tombstone needs an order value: name the header that carries it "
                          "(order_header) or set order_from_timestamp=True")
    if order_by and len(order_by) > 1:
        raise ConfigError("sink.deletes", f"a tombstone carries one order value; sink.order_by has "
                          f"{len(order_by)} columns")
    if not order_by and ordered:
        raise ConfigError("sink.deletes.order_header" if deletes.order_header is not None else
                          "sink.deletes.order_from_timestamp", "without sink.order_by a tombstone is ordered "
                          "by its source position; there is no order value to set")


def check_deletes_output(sink_key: Sequence[str], key_columns: Sequence[str], value: object,
                         headers: Mapping[str, str]) -> None:
    """ConfigError where the output cannot carry a sink's deletes: a tombstone carries only the key."""
    if outside := [k for k in key_columns if k not in sink_key]:
        raise ConfigError("output.key", f"with sink.deletes the output key must be sink.key column(s): a "
                          f"tombstone carries only the key, and {outside} is not one")
    if not isinstance(value, JsonValue) or headers:
        raise ConfigError("output.value", "with sink.deletes the output is a JSON value without copied "
                          "headers (a tombstone of an Avro value or with headers is not built yet)")
