"""spark-submit entry point of the verifier's recompute: `recompute.py PIPELINE`.

A thin shell over eosbatch.spark.recompute; exit codes and the result file as in eosbatch.spark.entry.
"""

import sys

from eosbatch.spark import entry
from eosbatch.spark.recompute import recompute

if __name__ == "__main__":
    sys.exit(entry.main(recompute, "recompute.py PIPELINE", 1))
