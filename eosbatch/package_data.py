"""Files the package carries besides its modules: the ledger's migrations and the spark-submit apps.

They live in the repository's top-level `migrations/` and `spark_apps/`; `eosbatch/package-data/` links to
them, so a checkout (also an editable install) and an installed wheel find them at the same place in the
package. Never looked up relative to a checkout: an installed eosbatch has none.
"""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "package-data"
MIGRATIONS = FOLDER / "migrations"  # Alembic's script_location
SPARK_APPS = FOLDER / "spark_apps"  # the spark-submit engine's application files
