"""PostgreSQL: the ledger, staging and the commit statement."""
