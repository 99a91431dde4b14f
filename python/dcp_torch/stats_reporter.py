"""Sends ReportStepStats requests from a background thread, so that a slow
or restarting planner never holds up training. Thread-safe: report() from
any thread; close() once, from the owner."""

import queue
import threading


class StatsReporter:
    def __init__(self, client, log):
        self._client = client
        self._log = log
        self._queue = queue.Queue()
        self.sent = 0
        self.failed = 0
        self.last_response = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="dcp_torch-stats")
        self._thread.start()

    def report(self, request):
        """Queues a ReportStepStatsRequest; returns at once."""
        self._queue.put(request)

    def flush(self):
        """Waits until every queued report has been sent (or has failed)."""
        self._queue.join()

    def close(self):
        self._queue.put(None)
        self._thread.join()

    def _run(self):
        while True:
            request = self._queue.get()
            try:
                if request is None:
                    return
                self.last_response = self._client.report_step_stats(request)
                self.sent += 1
            except Exception as error:  # a report is advisory: log, go on
                self.failed += 1
                self._log(f"dcp_torch: warning: ReportStepStats of step "
                          f"{request.step} failed: {error}")
            finally:
                self._queue.task_done()
