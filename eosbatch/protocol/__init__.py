"""The batch protocol's decisions as pure functions: no sockets, no clock, testable in microseconds."""
