"""The Redis Streams layer: envelopes, producer, consumer-group runtime, reclaim, dead letters, job records.

Knows nothing of agents or processes.
"""

from streams.config import StreamSettings
from streams.connection import connect
from streams.envelope import DeadLetter, JobRequest, JobResult, Status, lane_for_priority
from streams.errors import DecodeError, NoGroupError, Reject, RequestTooLarge, RetryLater, StreamcrewError
from streams.jobs import JobExecutor, JobProcessor
from streams.keys import LANES, NOTIFIER_GROUP, WORKERS_GROUP, Keys
from streams.producer import Producer, Published
from streams.records import JobRecord, get_job, wait_for_terminal
from streams.runtime import GroupRuntime
from streams.workflow import Workflow, WorkflowInvalid

__all__ = [
    "LANES", "NOTIFIER_GROUP", "WORKERS_GROUP", "DeadLetter", "DecodeError", "GroupRuntime", "JobExecutor",
    "JobProcessor", "JobRecord", "JobRequest", "JobResult", "Keys", "NoGroupError", "Producer", "Published",
    "Reject", "RequestTooLarge", "RetryLater", "Status", "StreamSettings", "StreamcrewError", "connect",
    "Workflow", "WorkflowInvalid", "get_job", "lane_for_priority", "wait_for_terminal",
]
