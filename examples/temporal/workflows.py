"""The workflow: run one step activity, with a heartbeat timeout and retries."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities import StepInput, run_step


@workflow.defn
class StepWorkflow:
    @workflow.run
    async def run(self, inp: StepInput) -> list[str]:
        return await workflow.execute_activity(
            run_step, inp,
            start_to_close_timeout=timedelta(minutes=10),
            # The step heartbeats every third of this; a worker that dies is noticed after it,
            # and the retry resumes from the last heartbeat.
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=5),
            # Wait for the step to have ended (followers cancelled, ends recorded) before the
            # workflow goes on after a cancellation.
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
