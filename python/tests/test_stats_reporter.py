"""Step reports go to the planner from a background thread: report()
returns while the planner has not answered, and a failed report is logged,
not raised (no processes, no planner)."""

import threading

from dcp_torch._proto import planner_service_pb2 as pb
from dcp_torch.stats_reporter import StatsReporter


class _BlockingClient:
    """Answers ReportStepStats only once `answer` is set; records the
    thread each call ran on."""

    def __init__(self):
        self.answer = threading.Event()
        self.called = threading.Event()
        self.threads = []

    def report_step_stats(self, request):
        self.threads.append(threading.get_ident())
        self.called.set()
        if not self.answer.wait(timeout=60):
            raise TimeoutError("the test never answered")
        if request.step == 1:
            raise RuntimeError("planner says no")
        return f"ok {request.step}"


def test_report_returns_before_the_planner_answers():
    client, lines = _BlockingClient(), []
    reporter = StatsReporter(client, lines.append)
    reporter.report(pb.ReportStepStatsRequest(step=0))  # returns although the call cannot finish
    assert client.called.wait(timeout=60)
    assert reporter.sent == 0
    client.answer.set()
    reporter.report(pb.ReportStepStatsRequest(step=1))
    reporter.flush()
    assert (reporter.sent, reporter.failed) == (1, 1)
    assert reporter.last_response == "ok 0"
    assert client.threads and all(t != threading.get_ident()
                                  for t in client.threads)
    assert len(lines) == 1 and "step 1 failed: planner says no" in lines[0]
    reporter.close()
