"""The batch protocol's steps, each a plain function that the CLI, the Spark app and the DAGs call.

plan -> process -> commit -> publish (-> finalize); abort on failure before the commit. Every step is
safe to re-run: it reads the batch's state first and does only what is left. One module per step (early
publish: commit and publish at once); runs of many batches are eosbatch.running's.
"""

from eosbatch.kafka.publisher import release as release_publishers
from eosbatch.steps.aborting import abort, aborted_on_failure
from eosbatch.steps.committing import commit
from eosbatch.steps.early import commit_and_publish
from eosbatch.steps.planning import check_sources, plan, recover, starting_offsets, track_partitions
from eosbatch.steps.processing import process
from eosbatch.steps.publishing import finalize, publish, publish_to_kafka
from eosbatch.steps.shared import Log, check_output_topic, marker_group, quiet, transactional_id

__all__ = ["Log", "abort", "aborted_on_failure", "check_output_topic", "check_sources", "commit",
           "commit_and_publish", "finalize", "marker_group", "plan", "process", "publish", "publish_to_kafka",
           "quiet", "recover", "release_publishers", "starting_offsets", "track_partitions", "transactional_id"]
