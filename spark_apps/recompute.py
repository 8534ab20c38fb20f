"""spark-submit entry point of the verifier's recompute: `recompute.py PIPELINE RESULT_JSON`.

A thin shell over eosbatch.spark.recompute; exit codes as in eosbatch.spark.entry.
"""

import sys

from eosbatch.spark import entry
from eosbatch.spark.recompute import recompute

if __name__ == "__main__":
    sys.exit(entry.main(recompute, "recompute.py PIPELINE RESULT_JSON", 2))
