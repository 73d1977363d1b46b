"""How the API tells Temporal's refusals apart (service/temporal.py): an Update the workflow
could not take because its workflow task failed is FAILED_PRECONDITION carrying a
WorkflowNotReadyFailure (503, send it again), and only that; any other FAILED_PRECONDITION is not."""

from google.protobuf.any_pb2 import Any
from google.rpc import status_pb2
from temporalio.api.errordetails.v1 import WorkflowNotReadyFailure, WorkflowExecutionAlreadyStartedFailure
from temporalio.service import RPCError, RPCStatusCode

from signoff.service.temporal import _not_ready


def _error(status: RPCStatusCode, *details) -> RPCError:
    packed = []
    for d in details:
        a = Any()
        a.Pack(d)
        packed.append(a)
    return RPCError("refused", status, status_pb2.Status(code=int(status), message="refused",
                                                          details=packed).SerializeToString())


def test_a_workflow_not_ready_refusal_is_told_apart():
    assert _not_ready(_error(RPCStatusCode.FAILED_PRECONDITION, WorkflowNotReadyFailure()))


def test_other_refusals_are_not_taken_for_it():
    assert not _not_ready(_error(RPCStatusCode.FAILED_PRECONDITION))
    assert not _not_ready(_error(RPCStatusCode.FAILED_PRECONDITION, WorkflowExecutionAlreadyStartedFailure()))
    assert not _not_ready(_error(RPCStatusCode.NOT_FOUND, WorkflowNotReadyFailure()))
    assert not _not_ready(RPCError("refused", RPCStatusCode.FAILED_PRECONDITION, b"\xff not a status"))
