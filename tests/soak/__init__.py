"""The soak of issue 37 (item 6): `python -m tests.soak --minutes N`, run by hand, never by pytest (no test_
modules here). docs/reference/tests.md says how to run it and what it checks."""
